"""Tables for PodGroupMinResources arithmetic: quota-name mapping, scopes, both guarantees."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from priogate import quota
from priogate.resources import parse_resource_list


def rq(name="q", hard=None, used=None, scopes=None, selector=None):
    spec = {"hard": hard or {}}
    if scopes:
        spec["scopes"] = scopes
    if selector:
        spec["scopeSelector"] = {"matchExpressions": selector}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": {"used": used or {}}}


def res(group, demand, cls=""):
    return quota.Reservation(group, cls, quota.quota_names(parse_resource_list(demand), 0))


@pytest.mark.parametrize(
    ("requests", "pods", "want"),
    [
        ({"cpu": "1"}, 0, {"cpu": F(1), "requests.cpu": F(1)}),
        ({"memory": "1Gi"}, 0, {"memory": F(2**30), "requests.memory": F(2**30)}),
        ({"requests.cpu": "500m"}, 0, {"cpu": F(1, 2), "requests.cpu": F(1, 2)}),
        ({"nvidia.com/gpu": "2"}, 0, {"requests.nvidia.com/gpu": F(2)}),
        # The quota evaluator charges hugepages bare and as requests. (podComputeUsageHelper).
        (
            {"hugepages-2Mi": "4Mi"},
            0,
            {"hugepages-2Mi": F(4 * 2**20), "requests.hugepages-2Mi": F(4 * 2**20)},
        ),
        (
            {"ephemeral-storage": "1G"},
            0,
            {"ephemeral-storage": F(10**9), "requests.ephemeral-storage": F(10**9)},
        ),
        # limits.* count under their own names, against limits.* hards (Volcano's quota check).
        ({"limits.cpu": "4"}, 0, {"limits.cpu": F(4)}),
        # Volcano's job controller writes both names of one resource, equal: counted once.
        (
            {"cpu": "3", "requests.cpu": "3", "memory": "1Gi", "requests.memory": "1Gi"},
            0,
            {"cpu": F(3), "requests.cpu": F(3), "memory": F(2**30), "requests.memory": F(2**30)},
        ),
        # Differing amounts (refused at admission; a stored entry may hold them): the larger.
        ({"cpu": "2", "requests.cpu": "3"}, 0, {"cpu": F(3), "requests.cpu": F(3)}),
        # A pod count in minResources: the larger of it and minMember, once under each name.
        ({"pods": "4", "count/pods": "4"}, 2, {"pods": F(4), "count/pods": F(4)}),
        ({"pods": "1"}, 3, {"pods": F(3), "count/pods": F(3)}),
        ({}, 3, {"pods": F(3), "count/pods": F(3)}),
        (
            {"cpu": "1.5", "memory": "100M", "example.com/fpga": "1"},
            2,
            {
                "cpu": F(3, 2),
                "requests.cpu": F(3, 2),
                "memory": F(10**8),
                "requests.memory": F(10**8),
                "requests.example.com/fpga": F(1),
                "pods": F(2),
                "count/pods": F(2),
            },
        ),
    ],
)
def test_quota_names(requests, pods, want):
    assert quota.quota_names(parse_resource_list(requests), pods) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ({"cpu": "3", "requests.cpu": "3", "pods": "2", "count/pods": "2"}, None),
        ({"cpu": "3000m", "requests.cpu": "3"}, None),  # equal amounts, written differently
        ({"nvidia.com/gpu": "1", "requests.nvidia.com/gpu": "1", "limits.cpu": "2"}, None),
        ({"hugepages-2Mi": "2Mi", "count/foo.example.com": "1"}, None),
        ({"cpu": "2", "requests.cpu": "3"}, "cpu=2 and requests.cpu=3 name one resource"),
        ({"pods": "2", "count/pods": "3"}, "count/pods=3 and pods=2 name one resource"),
        ({"cpu\n\x1b[2J": "1"}, 'Invalid value: "cpu\\n\\u001b[2J": not a valid resource name'),
        ({"Bad_Prefix/gpu": "1"}, "not a valid resource name"),
        ({"-cpu": "1"}, "not a valid resource name"),
        ({"x" * 64: "1"}, "not a valid resource name"),
        ({"example.com/": "1"}, "not a valid resource name"),
        ({"cpu\\n": "1"}, "not a valid resource name"),  # a regex "$" would let a trailing newline by
        ({"example.com\\n/gpu": "1"}, "not a valid resource name"),
        ({"a/b/c": "1"}, "not a valid resource name"),
    ],
)
def test_min_resources_problem(raw, want):
    raw = {name.encode().decode("unicode_escape"): q for name, q in raw.items()}
    problem = quota.min_resources_problem(raw)
    if want is None:
        assert problem is None
    else:
        assert problem is not None and want in problem, problem
        assert "\x1b" not in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("spec_kw", "consumer", "applies"),
    [
        ({}, quota.Consumer(""), True),
        (
            {"selector": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]},
            quota.Consumer("high"),
            True,
        ),
        (
            {"selector": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]},
            quota.Consumer("low"),
            False,
        ),
        (
            {"selector": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}]},
            quota.Consumer(""),
            True,
        ),
        ({"selector": [{"scopeName": "PriorityClass", "operator": "Exists"}]}, quota.Consumer(""), False),
        ({"selector": [{"scopeName": "PriorityClass", "operator": "Exists"}]}, quota.Consumer("x"), True),
        (
            {"selector": [{"scopeName": "PriorityClass", "operator": "DoesNotExist"}]},
            quota.Consumer(""),
            True,
        ),
        ({"scopes": ["NotTerminating"]}, quota.Consumer(""), True),
        ({"scopes": ["Terminating"]}, quota.Consumer(""), False),
        ({"scopes": ["BestEffort"]}, quota.Consumer(""), False),  # a group reserves resources
        ({"scopes": ["NotBestEffort"]}, quota.Consumer(""), True),
        ({"scopes": ["Terminating"]}, quota.Consumer("", {"spec": {"activeDeadlineSeconds": 5}}), True),
        ({"scopes": ["BestEffort"]}, quota.Consumer("", {"spec": {"containers": [{"name": "c"}]}}), True),
        (
            {
                "scopes": ["NotTerminating"],
                "selector": [{"scopeName": "PriorityClass", "operator": "In", "values": ["a"]}],
            },
            quota.Consumer("b"),
            False,
        ),
    ],
)
def test_quota_applies(spec_kw, consumer, applies):
    assert quota.quota_applies(rq(**spec_kw), consumer) is applies


def test_podgroup_fits_exactly_at_the_limit():
    q = rq(hard={"cpu": "10"})
    others = [res(f"g{i}", {"cpu": "1"}) for i in range(9)]
    assert quota.check_podgroup([q], others, res("new", {"cpu": "1"})) is None
    message = quota.check_podgroup([q], [*others, res("g9", {"cpu": "1"})], res("new", {"cpu": "1"}))
    assert message == (
        "exceeded quota: q, requested: cpu=1, reserved: cpu=10, limited: cpu=10: "
        "the summed minResources of the namespace's PodGroups may not exceed its ResourceQuota"
    )


@pytest.mark.parametrize(
    ("hard", "others", "this", "over"),
    [
        ({"requests.cpu": "2"}, [{"cpu": "1500m"}], {"cpu": "500m"}, None),
        ({"requests.cpu": "2"}, [{"cpu": "1500m"}], {"cpu": "501m"}, "requests.cpu"),
        ({"memory": "1Gi"}, [{"memory": "512Mi"}], {"memory": "512Mi"}, None),
        ({"memory": "1Gi"}, [{"memory": "512Mi"}], {"memory": "513Mi"}, "memory"),
        ({"memory": "1G"}, [], {"memory": "1Gi"}, "memory"),  # G is decimal, Gi binary
        (
            {"requests.nvidia.com/gpu": "4"},
            [{"nvidia.com/gpu": 3}],
            {"nvidia.com/gpu": 2},
            "requests.nvidia.com/gpu",
        ),
        ({"cpu": "100", "memory": "1Ki"}, [], {"cpu": "1", "memory": "2Ki"}, "memory"),
        ({"cpu": "1"}, [], {"memory": "100Gi"}, None),  # untracked resource: no limit
        ({"cpu": "1e3"}, [{"cpu": "999"}], {"cpu": "1"}, None),
        ({"cpu": "0.5"}, [], {"cpu": "600m"}, "cpu"),
    ],
)
def test_check_podgroup_table(hard, others, this, over):
    got = quota.check_podgroup(
        [rq(hard=hard)], [res(f"o{i}", d) for i, d in enumerate(others)], res("new", this)
    )
    if over is None:
        assert got is None
    else:
        assert got is not None and f"requested: {over}=" in got


def test_pods_quota_counts_min_member():
    q = rq(hard={"pods": "5"})
    reservation = lambda g, n: quota.Reservation(g, "", quota.quota_names({}, n))  # noqa: E731
    assert quota.check_podgroup([q], [reservation("a", 3)], reservation("b", 2)) is None
    assert "pods=3" in quota.check_podgroup([q], [reservation("a", 3)], reservation("b", 3))


def test_scoped_quota_only_counts_groups_of_its_class():
    q = rq(hard={"cpu": "4"}, selector=[{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}])
    others = [res("h", {"cpu": "3"}, "high"), res("l", {"cpu": "100"}, "low")]
    assert quota.check_podgroup([q], others, res("new", {"cpu": "1"}, "high")) is None
    assert quota.check_podgroup([q], others, res("new", {"cpu": "2"}, "high")) is not None
    assert quota.check_podgroup([q], others, res("new", {"cpu": "50"}, "low")) is None


def test_unconsumed():
    r = res("g", {"cpu": "4", "memory": "4Gi"})
    left = quota.unconsumed(r, {"cpu": F(1), "requests.cpu": F(1), "memory": F(8 * 2**30)})
    assert left == {"cpu": F(3), "requests.cpu": F(3), "requests.memory": F(4 * 2**30)}


@pytest.mark.parametrize(
    ("used", "asked", "reserved", "refused"),
    [
        ({"cpu": "0"}, {"cpu": "5"}, {"cpu": "5"}, False),  # 0 + 5 + 5 = 10
        ({"cpu": "0"}, {"cpu": "6"}, {"cpu": "5"}, True),
        ({"cpu": "4"}, {"cpu": "1"}, {"cpu": "5"}, False),
        ({"cpu": "4"}, {"cpu": "1100m"}, {"cpu": "5"}, True),
        ({"cpu": "9"}, {"memory": "1Gi"}, {"cpu": "5"}, False),  # asks for nothing reserved
        ({}, {"cpu": "11"}, {}, False),  # no reservations: the built-in quota decides alone
    ],
)
def test_check_pod_table(used, asked, reserved, refused):
    q = rq(hard={"cpu": "10"}, used=used)
    demand = quota.quota_names(parse_resource_list(asked), 1)
    r = res("other", reserved)
    others = [(r, r.demand)] if reserved else []
    got = quota.check_pod([q], quota.Consumer("", {"spec": {}}), demand, others)
    assert (got is not None) is refused
    if refused:
        assert "reserved by PodGroups: cpu=" in got and "cannot be used by other pods" in got
