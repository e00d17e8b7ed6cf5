"""Table tests for every rule of priogate.priority (rule IDs from the upstream behaviour spec)."""

from __future__ import annotations

import pytest

from priogate import priority as p
from tests.builders import priority_class

CLASSES = {
    c["metadata"]["name"]: c
    for c in [
        priority_class("default1", value=1000, default=True),
        priority_class("nondefault1", value=2000),
        priority_class("never", value=500, preemption_policy="Never"),
        priority_class("nopolicy", value=7, preemption_policy=None),
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
        ([priority_class("a", value=5)], None),
        ([priority_class("a", value=5, default=True)], "a"),
        (
            [priority_class("hi", value=10, default=True), priority_class("lo", value=3, default=True)],
            "lo",
        ),  # PC-A1: lowest value wins
        (
            [priority_class("b", value=3, default=True), priority_class("a", value=3, default=True)],
            "a",
        ),  # ties by name, deterministic
        ([priority_class("neg", value=-5, default=True), priority_class("z", value=0, default=True)], "neg"),
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
        (priority_class("ok", value=1_000_000_000), []),  # PC-V3: the ceiling itself is allowed
        (priority_class("scavenger", value=-(2**31)), []),
        (
            priority_class("too-high", value=1_000_000_001),
            ["maximum allowed value of a user defined priority is 1000000000"],
        ),
        (priority_class("systemfoo", value=5), []),  # only the literal "system-" prefix is reserved
        (
            priority_class("system-foo", value=5),
            ["reserved for system use only", "system-foo is not a known system priority class"],
        ),
        (
            priority_class("system-node-critical", value=5),
            ["value of system-node-critical PriorityClass must be 2000001000"],
        ),
        (
            priority_class("system-node-critical", value=2000001000, default=True),
            ["globalDefault of system-node-critical PriorityClass must be false"],
        ),
        (
            priority_class("system-cluster-critical", value=2000000000),
            [],
        ),  # re-creating a built-in is allowed
        (priority_class("Bad_Name", value=1), ["a lowercase RFC 1123 subdomain"]),
        (priority_class("a" * 254, value=1), ["RFC 1123 subdomain"]),
        (priority_class("p", value=1, preemption_policy=""), ["preemptionPolicy: Required value"]),
        (priority_class("p", value=1, preemption_policy="Sometimes"), ['Unsupported value: "Sometimes"']),
        (priority_class("p", value=1, preemption_policy="Never"), []),
        (priority_class("p", value=2**31), ["must be an int32"]),
        (
            priority_class("Bad", value=2_000_000_000, preemption_policy="x"),
            ["RFC 1123", "maximum allowed value", "Unsupported value"],
        ),
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
        (priority_class("a", value=1), priority_class("a", value=1, default=True), []),
        (
            priority_class("a", value=1),
            priority_class("a", value=2),
            ["value: Forbidden: may not be changed in an update."],
        ),  # PC-U1
        (
            priority_class("a", value=1),
            priority_class("a", value=1, preemption_policy="Never"),
            ['preemptionPolicy: Invalid value: "Never": field is immutable'],
        ),
        (
            priority_class("system-cluster-critical", value=2000000000),
            priority_class("system-cluster-critical", value=2000000000, default=True),
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
        (
            priority_class("a", value=1),
            "CREATE",
            priority_class("d", value=0, default=True),
            None,
        ),  # not a default: never checked
        (priority_class("a", value=1, default=True), "CREATE", None, None),
        (
            priority_class("a", value=1, default=True),
            "CREATE",
            priority_class("d", value=0, default=True),
            "PriorityClass d is already marked",
        ),
        (
            priority_class("d", value=0, default=True),
            "UPDATE",
            priority_class("d", value=0, default=True),
            None,
        ),  # the default itself
        (
            priority_class("a", value=1, default=True),
            "UPDATE",
            priority_class("d", value=0, default=True),
            "Only one default can exist",
        ),
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
