"""Table tests for every rule of priogate.priority (rule IDs from the upstream behaviour spec)."""

from __future__ import annotations

import pytest

from priogate import priority as p
from tests.builders import priority_class as pc

CLASSES = {
    c["metadata"]["name"]: c
    for c in [
        pc("default1", 1000, default=True),
        pc("nondefault1", 2000),
        pc("never", 500, policy="Never"),
        pc("nopolicy", 7, policy=None),
    ]
}
DEFAULT = CLASSES["default1"]


@pytest.mark.parametrize(
    ("class_name", "default", "want"),
    [
        ("nondefault1", DEFAULT, p.Resolution(2000, "PreemptLowerPriority", "nondefault1", False)),  # POD-C1
        ("never", DEFAULT, p.Resolution(500, "Never", "never", False)),
        ("nopolicy", None, p.Resolution(7, "PreemptLowerPriority", "nopolicy", False)),  # PC-DEF-1
        (None, DEFAULT, p.Resolution(1000, "PreemptLowerPriority", "default1", True)),  # POD-C2
        ("", DEFAULT, p.Resolution(1000, "PreemptLowerPriority", "default1", True)),
        (None, None, p.Resolution(0, "PreemptLowerPriority", "", False)),
    ],
)
def test_resolve(class_name, default, want):
    assert p.resolve(class_name, CLASSES, default) == want


@pytest.mark.parametrize("name", ["missing", "Not_Valid", "system-node-critical"])
def test_resolve_unknown_class(name):  # POD-C3: a plain lookup, malformed names included
    with pytest.raises(p.ClassNotFound, match=f"no PriorityClass with name {name} was found"):
        p.resolve(name, CLASSES, DEFAULT)


@pytest.mark.parametrize(
    ("classes", "want"),
    [
        ([], None),
        ([pc("a", 5)], None),
        ([pc("a", 5, default=True)], "a"),
        ([pc("hi", 10, default=True), pc("lo", 3, default=True)], "lo"),  # PC-A1: lowest value wins
        ([pc("b", 3, default=True), pc("a", 3, default=True)], "a"),  # ties by name, deterministic
        ([pc("neg", -5, default=True), pc("z", 0, default=True)], "neg"),
    ],
)
def test_current_default(classes, want):
    got = p.current_default(classes)
    assert (got["metadata"]["name"] if got else None) == want


R = p.Resolution(1000, "PreemptLowerPriority", "c", False)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({}, None),
        ({"priority": 1000}, None),  # equal preset is fine (reinvocation, re-creation)
        ({"priority": 1000, "preemptionPolicy": "PreemptLowerPriority"}, None),
        (
            {"priority": 1},
            "the integer value of priority (1) must not be provided in pod spec; "
            "priority admission controller computed 1000 from the given PriorityClass name",
        ),
        ({"priority": 0}, "(0) must not be provided"),
        ({"preemptionPolicy": "Never"}, "the string value of PreemptionPolicy (Never) must not be provided"),
        ({"preemptionPolicy": "Sometimes"}, "PreemptionPolicy (Sometimes)"),
        ({"priority": 5, "preemptionPolicy": "Never"}, "integer value of priority (5)"),  # priority first
    ],
)
def test_preset_conflict(spec, fragment):
    got = p.preset_conflict(spec, R)
    if fragment is None:
        assert got is None
    else:
        assert got is not None and fragment in got


@pytest.mark.parametrize(
    ("obj", "fragments"),
    [
        (pc("ok", 1_000_000_000), []),  # PC-V3: the ceiling itself is allowed
        (pc("scavenger", -(2**31)), []),
        (pc("too-high", 1_000_000_001), ["maximum allowed value of a user defined priority is 1000000000"]),
        (pc("systemfoo", 5), []),  # only the literal "system-" prefix is reserved
        (
            pc("system-foo", 5),
            ["reserved for system use only", "system-foo is not a known system priority class"],
        ),
        (pc("system-node-critical", 5), ["value of system-node-critical PriorityClass must be 2000001000"]),
        (
            pc("system-node-critical", 2000001000, default=True),
            ["globalDefault of system-node-critical PriorityClass must be false"],
        ),
        (pc("system-cluster-critical", 2000000000), []),  # re-creating a built-in is allowed
        (pc("Bad_Name", 1), ["a lowercase RFC 1123 subdomain"]),
        (pc("a" * 254, 1), ["RFC 1123 subdomain"]),
        (pc("p", 1, policy=""), ["preemptionPolicy: Required value"]),
        (pc("p", 1, policy="Sometimes"), ['Unsupported value: "Sometimes"']),
        (pc("p", 1, policy="Never"), []),
        (pc("p", 2**31), ["must be an int32"]),
        (pc("Bad", 2_000_000_000, policy="x"), ["RFC 1123", "maximum allowed value", "Unsupported value"]),
    ],
)
def test_validate_class_create(obj, fragments):
    errors = p.validate_class_create(obj)
    joined = "; ".join(errors)
    assert bool(errors) == bool(fragments), errors
    for f in fragments:
        assert f in joined


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        (pc("a", 1), pc("a", 1, default=True), []),
        (pc("a", 1), pc("a", 2), ["value: Forbidden: may not be changed in an update."]),  # PC-U1
        (
            pc("a", 1),
            pc("a", 1, policy="Never"),
            ['preemptionPolicy: Invalid value: "Never": field is immutable'],
        ),
        (
            pc("system-cluster-critical", 2000000000),
            pc("system-cluster-critical", 2000000000, default=True),
            [],
        ),
    ],
)
def test_validate_class_update(old, new, fragments):
    errors = p.validate_class_update(old, new)
    assert bool(errors) == bool(fragments)
    for f in fragments:
        assert f in "; ".join(errors)


@pytest.mark.parametrize(
    ("obj", "operation", "default", "want"),
    [
        (pc("a", 1), "CREATE", pc("d", 0, default=True), None),  # not a default: never checked
        (pc("a", 1, default=True), "CREATE", None, None),
        (pc("a", 1, default=True), "CREATE", pc("d", 0, default=True), "PriorityClass d is already marked"),
        (pc("d", 0, default=True), "UPDATE", pc("d", 0, default=True), None),  # the default itself
        (pc("a", 1, default=True), "UPDATE", pc("d", 0, default=True), "Only one default can exist"),
    ],
)
def test_global_default_conflict(obj, operation, default, want):
    got = p.global_default_conflict(obj, operation, default)
    assert (got is None) == (want is None)
    if want:
        assert want in got


@pytest.mark.parametrize(
    ("name", "refused"),
    [("system-node-critical", True), ("system-cluster-critical", True), ("system-x", False)],
)
def test_system_class_delete(name, refused):
    assert (p.system_class_delete_problem(name) is not None) is refused
