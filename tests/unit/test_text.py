"""priogate.text.escape_untrusted: control, format and line-separator characters become visible
escapes; printable text, ASCII or not, is left alone."""

from __future__ import annotations

import string
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from priogate.text import escape_untrusted

# The characters that must never reach a terminal raw: C0, DEL, C1, the Unicode line and
# paragraph separators, the bidi embeddings/overrides and isolates (Trojan Source).
FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)
# Any code point, lone surrogates included (hypothesis leaves Cs out unless told), with the
# forbidden ones drawn often.
ANY_TEXT = st.text(st.one_of(st.sampled_from(sorted(FORBIDDEN)), st.characters(exclude_categories=())))


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("cpu", "cpu"),
        ("", ""),
        ("cpu\n\x1b[2J\x1b[H State: Running", "cpu\\n\\x1b[2J\\x1b[H State: Running"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
        ("\x85\x9b31m", "\\x85\\x9b31m"),  # C1: NEL, and CSI, which some terminals obey
        ("line\u2028break\u2029", "line\\u2028break\\u2029"),
        ("user\u202egnp.exe", "user\\u202egnp.exe"),  # RIGHT-TO-LEFT OVERRIDE
        (
            "\u2066\u2067\u2068\u2069\u202a\u202b\u202c\u202d",
            "\\u2066\\u2067\\u2068\\u2069" + "\\u202a\\u202b\\u202c\\u202d",
        ),
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("\U000e0041tag", "\\U000e0041tag"),  # a TAG character (Cf) outside the BMP
        ("\ud800lone", "\\ud800lone"),  # a lone surrogate, as json.loads returns for "\ud800"
        ("é 日本語 Ω ü 🚀", "é 日本語 Ω ü 🚀"),
        ("no\u00a0break", "no\u00a0break"),  # a space separator prints as a space
        ("a\\nb \\x1b", "a\\nb \\x1b"),  # backslashes are not escaped: idempotent
    ],
)
def test_escapes(raw: str, shown: str) -> None:
    assert escape_untrusted(raw) == shown


@given(ANY_TEXT)
def test_output_holds_no_control_bidi_or_separator_character(text: str) -> None:
    out = escape_untrusted(text)
    assert not FORBIDDEN & set(out), ascii(out)
    assert all(unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in out), ascii(out)
    out.encode("utf-8")  # no lone surrogate left: a UTF-8 terminal or API body can carry it


@given(ANY_TEXT)
def test_escaping_twice_is_escaping_once(text: str) -> None:
    once = escape_untrusted(text)
    assert escape_untrusted(once) == once


@given(st.text(alphabet=string.printable.translate(str.maketrans("", "", "\t\n\r\x0b\x0c"))))
def test_printable_ascii_is_unchanged(text: str) -> None:
    assert escape_untrusted(text) == text


@given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp"))))
def test_printable_unicode_is_unchanged(text: str) -> None:
    assert escape_untrusted(text) == text
