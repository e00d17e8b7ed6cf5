"""Label selectors in kubectl's syntax (priogate/label_selector.py): parsing as upstream's
labels.Parse does, matching as labels.Requirement.Matches does, and the compact form the class
access policy's CEL reads (webhook/class_access_policy.py), checked against a mirror of that CEL."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from priogate.label_selector import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NEVER,
    NOT_IN,
    Requirement,
    SelectorError,
    encode,
    encode_text,
    matches,
    parse,
    render,
)


@pytest.mark.parametrize(
    "text, want",
    [
        ("", ()),
        ("   ", ()),
        ("tier=prod", (Requirement("tier", IN, ("prod",)),)),
        ("tier==prod", (Requirement("tier", IN, ("prod",)),)),
        ("tier!=prod", (Requirement("tier", NOT_IN, ("prod",)),)),
        ("team in (ml,infra)", (Requirement("team", IN, ("infra", "ml")),)),
        ("team in ( ml , infra )", (Requirement("team", IN, ("infra", "ml")),)),
        ("team notin (ml)", (Requirement("team", NOT_IN, ("ml",)),)),
        ("gpu", (Requirement("gpu", EXISTS),)),
        ("!gpu", (Requirement("gpu", DOES_NOT_EXIST),)),
        ("a=", (Requirement("a", IN, ("",)),)),
        ("a in (x,)", (Requirement("a", IN, ("", "x")),)),
        ("example.com/team in (ml)", (Requirement("example.com/team", IN, ("ml",)),)),
        (
            "tier=prod,!legacy, team in (a,b)",
            (
                Requirement("legacy", DOES_NOT_EXIST),
                Requirement("team", IN, ("a", "b")),
                Requirement("tier", IN, ("prod",)),
            ),
        ),
    ],
)
def test_parse(text, want):
    assert parse(text) == want


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("a>1", "not supported"),
        ("a<1", "not supported"),
        ("a b", "an operator"),
        ("a=b=c", "a comma was expected"),
        ("a,", "ends with a comma"),
        (",a", "a label key was expected"),
        ("a in ()", "must not be empty"),
        ("a in (b", "not closed"),
        ("a in b", "'(' was expected"),
        ("a in (b c)", "unexpected 'c'"),
        ("!a=b", "nothing may follow"),
        ("-a=b", "not a valid label key"),
        ("a=-b", "not a valid label value"),
        ("a=" + "x" * 64, "not a valid label value"),
        ("x" * 64, "not a valid label key"),
        ("Bad_Prefix/a", "not a valid label key"),
    ],
)
def test_parse_refuses(text, fragment):
    with pytest.raises(SelectorError) as e:
        parse(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    "text, labels, want",
    [
        ("", {}, True),
        ("tier=prod", {"tier": "prod"}, True),
        ("tier=prod", {"tier": "dev"}, False),
        ("tier=prod", {}, False),
        ("tier!=prod", {}, True),  # a missing key matches != and notin (Requirement.Matches)
        ("tier!=prod", {"tier": "prod"}, False),
        ("team in (ml,infra)", {"team": "infra"}, True),
        ("team notin (ml,infra)", {"team": "web"}, True),
        ("team notin (ml,infra)", {"team": "ml"}, False),
        ("gpu", {"gpu": ""}, True),
        ("!gpu", {"gpu": ""}, False),
        ("a=", {"a": ""}, True),
        ("tier=prod,team in (ml)", {"tier": "prod", "team": "web"}, False),
    ],
)
def test_matches(text, labels, want):
    assert matches(parse(text), labels) is want
    assert cel_mirror(encode(parse(text)), labels) is want


def cel_mirror(encoded: str, labels: dict[str, str]) -> bool:
    """webhook/class_access_policy.py's EXPRESSION, step by step, on CEL's split() semantics."""
    if encoded == "":
        return True
    for r in encoded.split(";"):
        parts = r.split(" ")
        op, key = parts[0], parts[1]
        if op == EXISTS:
            ok = key in labels
        elif op == DOES_NOT_EXIST:
            ok = key not in labels
        elif op == IN:
            ok = key in labels and labels[key] in parts[2].split(",")
        elif op == NOT_IN:
            ok = key not in labels or labels[key] not in parts[2].split(",")
        else:
            ok = False
        if not ok:
            return False
    return True


def test_an_unparsable_selector_is_encoded_to_match_nothing():
    assert encode_text("a>1").startswith(NEVER)
    assert cel_mirror(encode_text("a>1"), {"a": "2"}) is False
    assert cel_mirror(encode_text("a>1"), {}) is False


# ---- properties --------------------------------------------------------------------------------

_names = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?", fullmatch=True)
_keys = st.one_of(
    _names, st.builds(lambda p, n: f"{p}.io/{n}", st.from_regex(r"[a-z]{1,8}", fullmatch=True), _names)
)
_values = st.one_of(st.just(""), _names)
_requirements = st.one_of(
    st.builds(Requirement, _keys, st.sampled_from([EXISTS, DOES_NOT_EXIST])),
    st.builds(
        lambda k, op, vs: Requirement(k, op, tuple(sorted(set(vs)))),
        _keys,
        st.sampled_from([IN, NOT_IN]),
        st.lists(_values, min_size=1, max_size=4),
    ),
)
_selectors = st.lists(_requirements, max_size=4).map(
    lambda rs: tuple(sorted(set(rs), key=lambda r: (r.key, r.operator, r.values)))
)
_labels = st.dictionaries(_keys, _values, max_size=5)


@given(_selectors)
def test_render_parses_back(reqs):
    assert parse(render(reqs)) == reqs


@given(_selectors, _labels, st.data())
def test_the_compact_form_decides_as_the_selector(reqs, labels, data):
    # Labels that hit the selector's keys and values, not only random ones.
    for r in reqs:
        if data.draw(st.booleans()):
            labels = {**labels, r.key: data.draw(st.sampled_from(r.values or ("",)))}
    assert cel_mirror(encode(reqs), labels) is matches(reqs, labels)


@given(st.text(max_size=30))
def test_parse_never_fails_otherwise(text):
    with contextlib.suppress(SelectorError):
        parse(text)
