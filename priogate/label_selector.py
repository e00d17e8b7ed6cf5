"""Label selectors in kubectl's text syntax: parse, match, and the compact form kube-apiserver's
in-process policy evaluates (webhook/class_access_policy.py).

The grammar is upstream's (k8s.io/apimachinery pkg/labels/selector.go Parse): requirements
separated by commas, each `key`, `!key`, `key=value`, `key==value`, `key!=value`,
`key in (v1,v2)` or `key notin (v1,v2)`, with whitespace allowed between tokens; keys are
qualified names and values label values (pkg/util/validation). The empty selector matches every
label set (labels.Everything). Upstream's `key>N` and `key<N` are refused: metav1.LabelSelector,
which admins know from namespaceSelectors, has no such operator, and a namespace label that is
not an integer would make the comparison fail rather than not match.

Equality is kept as In with one value and inequality as NotIn with one value: upstream's
Requirement.Matches gives them the same meaning (a missing key matches NotIn and != alike).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)

_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME = re.compile(rf"((?P<prefix>{_DNS1123_SUBDOMAIN})/)?(?P<name>{_NAME})")
_LABEL_VALUE = re.compile(rf"({_NAME})?")
# The lexer's special characters (selector.go string2token); whitespace separates tokens too.
_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|<|>|[^\s!=,()<>]+)")


class SelectorError(ValueError):
    """A selector kubectl would not parse, or one this module refuses (`>` and `<`)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        # labels.Requirement.Matches: In needs the key; NotIn also matches without it.
        if self.operator == EXISTS:
            return self.key in labels
        if self.operator == DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator == IN:
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


def _key_problem(key: str) -> str | None:
    m = _QUALIFIED_NAME.fullmatch(key)
    if m is None:
        return (
            f'"{key}" is not a valid label key: a name of alphanumeric characters, "-", "_" or ".", '
            'starting and ending with one, with an optional DNS subdomain prefix and "/"'
        )
    if len(m.group("name")) > 63 or len(m.group("prefix") or "") > 253:
        return f'"{key}" is not a valid label key: the name must be at most 63 characters, the prefix 253'
    return None


def _value_problem(value: str) -> str | None:
    if len(value) > 63 or _LABEL_VALUE.fullmatch(value) is None:
        return (
            f'"{value}" is not a valid label value: at most 63 alphanumeric characters, "-", "_" or ".", '
            "starting and ending with an alphanumeric one"
        )
    return None


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing whitespace can fail to match, and it was stripped
            raise SelectorError(f"cannot read the selector at {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _is_word(token: str | None) -> bool:
    return token is not None and token not in ("!=", "==", "=", "!", ",", "(", ")", "<", ">")


def parse(text: str) -> tuple[Requirement, ...]:
    """The requirements of a selector in kubectl's syntax; SelectorError says what is wrong."""
    tokens = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def peek(k: int = 0) -> str | None:
        return tokens[i + k] if i + k < len(tokens) else None

    while i < len(tokens):
        negated = peek() == "!"
        if negated:
            i += 1
        key = peek()
        if not _is_word(key):
            raise SelectorError(f"a label key was expected, found {key or 'the end'!r}")
        assert key is not None
        i += 1
        op = peek()
        if negated or op in (None, ","):
            if negated and op not in (None, ","):
                raise SelectorError(f"nothing may follow !{key}, found {op!r}")
            reqs.append(Requirement(key, DOES_NOT_EXIST if negated else EXISTS))
        elif op in ("=", "==", "!="):
            i += 1
            value = peek()
            if _is_word(value):
                i += 1
            else:  # "key=" is the empty value, as upstream's parseExactValue reads it
                value = ""
            assert value is not None
            reqs.append(Requirement(key, NOT_IN if op == "!=" else IN, (value,)))
        elif op in ("in", "notin"):
            i += 1
            values, i = _parse_set(tokens, i, key)
            reqs.append(Requirement(key, IN if op == "in" else NOT_IN, tuple(sorted(set(values)))))
        elif op in ("<", ">"):
            raise SelectorError(f"the operator {op!r} is not supported here: use in or notin")
        else:
            raise SelectorError(f"an operator (=, ==, !=, in, notin) was expected after {key}, found {op!r}")
        sep = peek()
        if sep is not None:
            if sep != ",":
                raise SelectorError(f"a comma was expected after the requirement on {key}, found {sep!r}")
            i += 1
            if peek() is None:
                raise SelectorError("the selector ends with a comma")
    for r in reqs:
        problem = _key_problem(r.key) or next(filter(None, map(_value_problem, r.values)), None)
        if problem:
            raise SelectorError(problem)
    return tuple(sorted(reqs, key=lambda r: (r.key, r.operator, r.values)))


def _parse_set(tokens: list[str], i: int, key: str) -> tuple[list[str], int]:
    """The values of `key in (...)` starting at the "(" at tokens[i], and the position after its
    ")"; an empty value is written as nothing between commas (selector.go parseIdentifiersList)."""
    if i >= len(tokens) or tokens[i] != "(":
        raise SelectorError(f"a '(' was expected after the set operator on {key}")
    values: list[str] = []
    j, expect_value = i + 1, True
    while True:
        tok = tokens[j] if j < len(tokens) else None
        if tok is None:
            raise SelectorError(f"the set of values of {key} is not closed with ')'")
        if tok == ")":
            if expect_value and values:
                values.append("")  # "(a,)": a trailing empty value
            break
        if tok == ",":
            if expect_value:
                values.append("")
            expect_value = True
        elif _is_word(tok) and expect_value:
            values.append(tok)
            expect_value = False
        else:
            raise SelectorError(f"unexpected {tok!r} in the set of values of {key}")
        j += 1
    if not values:
        raise SelectorError(f"the set of values of {key} must not be empty")
    return values, j + 1


def matches(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


def render(requirements: Iterable[Requirement]) -> str:
    """kubectl's syntax again (parse(render(r)) == r for parsed requirements)."""
    parts = []
    for r in requirements:
        if r.operator == EXISTS:
            parts.append(r.key)
        elif r.operator == DOES_NOT_EXIST:
            parts.append(f"!{r.key}")
        elif len(r.values) == 1:  # "key in ()" would not parse back for the empty value
            parts.append(f"{r.key}{'=' if r.operator == IN else '!='}{r.values[0]}")
        else:
            parts.append(f"{r.key} {'in' if r.operator == IN else 'notin'} ({','.join(r.values)})")
    return ",".join(parts)


# ---- the compact form kube-apiserver's CEL reads ------------------------------------------------
# "<operator> <key> <v1,v2,...>" per requirement, joined by ";". Keys and values never hold a
# space, a ";" or a ",", so CEL's split() takes it apart; "" selects everything. An operator CEL
# does not know (NEVER) matches nothing: the form of a selector that does not parse.
NEVER = "Never"


def encode(requirements: Iterable[Requirement]) -> str:
    return ";".join(f"{r.operator} {r.key} {','.join(r.values)}" for r in requirements)


def encode_text(text: str) -> str:
    """encode(parse(text)), or NEVER for a selector that does not parse: a class whose selector
    slipped past validation (the PriorityClass hook was down) is usable nowhere, not everywhere."""
    try:
        return encode(parse(text))
    except SelectorError:
        return f"{NEVER} - "
