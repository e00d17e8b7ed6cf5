"""Untrusted text made safe to show: in a terminal, a status condition, an Event note, a log line.

Tenants write strings that priogate repeats to others: resource names in minResources, the
messages of conditions and Events copied into `kubectl priogate why`. A control character in
one of them moves the admin's cursor, clears the screen or starts a forged line; a bidi
override reorders what is shown (Trojan Source, CVE-2021-42574). kubectl escapes ESC and CR
for the same reason (k8s.io/cli-runtime/pkg/printers/terminal.go, EscapeTerminal, after
kubernetes/kubernetes#101695); this escapes every character of the Unicode categories that
do not print: Cc (C0, DEL, C1), Cf (bidi embeddings, overrides and isolates, zero-width
characters, BOM), Cs (lone surrogates, which no UTF-8 stream can carry either), Zl and Zp
(U+2028, U+2029, line breaks to some renderers). Printable Unicode is left as it is.

Each is written as Python writes it in a string literal (\\n, \\x1b, \\u202e), readable and
copyable into a search. A backslash is not escaped, so the escaping is idempotent (text
escaped twice reads as escaped once: a message copied from one condition into another stays
as it was) but, like kubectl's, not reversible: `\\n` may have been a newline or two
characters. Pure.
"""

from __future__ import annotations

import unicodedata

# The categories escaped: everything str.isprintable() calls non-printable except the space
# separators (Zs: no-break and ideographic spaces show as spaces), private use (Co) and
# unassigned (Cn) code points, which terminals draw as glyphs or boxes.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape_untrusted(text: str) -> str:
    """`text` with its non-printing characters written as visible escapes. Never raises."""
    if text.isprintable():  # the common case, in C: nothing to do
        return text
    return "".join(_escape_char(ch) if unicodedata.category(ch) in _ESCAPED else ch for ch in text)
