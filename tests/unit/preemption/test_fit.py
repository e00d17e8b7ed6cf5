"""What "fits" means: resources and pod count, node selector, required node affinity, taints
and tolerations, unschedulable nodes, nominated pods; and which nodes preemption can use."""

from __future__ import annotations

import pytest

from tests.builders import node, pod
from tests.unit.preemption.outcomes import decided, outcomes, unresolved

HIGH = 100


def full(n: dict, cpu: str = "4") -> list[dict]:
    return [pod("low", priority=1, cpu=cpu, node=n["metadata"]["name"])]


@pytest.mark.parametrize(
    ("terms", "labels", "ok"),
    [
        (
            [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}],
            {"zone": "a"},
            True,
        ),
        ([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}], {"zone": "a"}, False),
        (
            [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}],
            {"zone": "a"},
            True,
        ),
        ([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}], {}, True),
        ([{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}], {"gpu": "x"}, True),
        ([{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}], {}, False),
        ([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}], {}, True),
        ([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}], {"gpu": "x"}, False),
        (
            [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}],
            {"cores": "16"},
            True,
        ),
        (
            [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}],
            {"cores": "8"},
            False,
        ),
        (
            [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}],
            {"cores": "many"},
            False,
        ),
        ([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}], {"cores": "4"}, True),
        ([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}], {}, False),
        # terms are ORed, expressions ANDed
        (
            [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            ],
            {"zone": "a"},
            True,
        ),
        (
            [
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]},
                        {"key": "gpu", "operator": "Exists"},
                    ]
                }
            ],
            {"zone": "a"},
            False,
        ),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}], {}, True),
        ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]}], {}, False),
        ([{}], {"zone": "a"}, False),  # an empty term matches nothing
    ],
)
def test_required_node_affinity(terms, labels, ok):
    n = node("n", labels=labels)
    result = outcomes([n, *full(n), pod("p", priority=HIGH, cpu="2", node_affinity=terms)])
    if ok:
        assert decided(result) == {"default/p": ("n", ["default/low"])}
    else:
        assert "didn't match Pod's node affinity/selector" in unresolved(result)["default/p"]


@pytest.mark.parametrize(
    ("selector", "ok"), [({"zone": "a"}, True), ({"zone": "b"}, False), ({"zone": "a", "disk": "ssd"}, False)]
)
def test_node_selector(selector, ok):
    n = node("n", labels={"zone": "a"})
    result = outcomes([n, *full(n), pod("p", priority=HIGH, cpu="2", node_selector=selector)])
    assert (decided(result) != {}) is ok


@pytest.mark.parametrize(
    ("taint", "tolerations", "ok"),
    [
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, None, False),
        ({"key": "k", "value": "v", "effect": "NoExecute"}, None, False),
        ({"key": "k", "value": "v", "effect": "PreferNoSchedule"}, None, True),  # only a preference
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, [{"key": "k", "value": "v"}], True),
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, [{"key": "k", "value": "w"}], False),
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, [{"key": "k", "operator": "Exists"}], True),
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, [{"operator": "Exists"}], True),  # tolerates all
        (
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
            False,
        ),
        (
            {"key": "k", "value": "v", "effect": "NoExecute"},
            [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
            True,
        ),
    ],
)
def test_taints_and_tolerations(taint, tolerations, ok):
    n = node("n", taints=[taint])
    result = outcomes([n, *full(n), pod("p", priority=HIGH, cpu="2", tolerations=tolerations)])
    assert (decided(result) == {"default/p": ("n", ["default/low"])}) is ok


@pytest.mark.parametrize(
    ("tolerations", "ok"),
    [
        (None, False),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], True),
    ],
)
def test_unschedulable_node(tolerations, ok):
    n = node("n", unschedulable=True)
    result = outcomes([n, *full(n), pod("p", priority=HIGH, cpu="2", tolerations=tolerations)])
    assert (decided(result) != {}) is ok
    if not ok:
        assert "node(s) were unschedulable" in unresolved(result)["default/p"]


@pytest.mark.parametrize(
    ("node_args", "bound", "want", "victims"),
    [
        # memory is checked like cpu
        ({"cpu": "8", "memory": "4Gi"}, [("m", 1, "1", "4Gi")], ("2", "1Gi"), ["default/m"]),
        # ephemeral storage and extended resources: only the resources the pod asks for count
        (
            {"cpu": "8", "allocatable": {"nvidia.com/gpu": "2"}},
            [("g1", 1, "1", None, {"nvidia.com/gpu": "1"}), ("g2", 2, "1", None, {"nvidia.com/gpu": "1"})],
            ("1", None, {"nvidia.com/gpu": "1"}),
            ["default/g1"],
        ),
        (
            {"cpu": "8", "allocatable": {"ephemeral-storage": "10Gi"}},
            [("e", 1, "1", None, {"ephemeral-storage": "8Gi"})],
            ("1", None, {"ephemeral-storage": "4Gi"}),
            ["default/e"],
        ),
        # pod count: a node full by count needs one pod out however small
        ({"cpu": "8", "pods": 2}, [("a", 1, "100m"), ("b", 2, "100m")], ("100m",), ["default/a"]),
    ],
)
def test_resource_dimensions(node_args, bound, want, victims):
    objects = [node("n", **node_args)]
    for name, priority, cpu, *rest in bound:
        memory = rest[0] if rest else None
        extra = rest[1] if len(rest) > 1 else None
        objects.append(pod(name, priority=priority, cpu=cpu, memory=memory, node="n", requests=extra))
    cpu, *rest = want
    objects.append(
        pod(
            "p",
            priority=HIGH,
            cpu=cpu,
            memory=rest[0] if rest else None,
            requests=rest[1] if len(rest) > 1 else None,
        )
    )
    assert decided(outcomes(objects)) == {"default/p": ("n", victims)}


def test_an_extended_resource_the_node_lacks_cannot_be_freed():
    objects = [
        node("n", cpu="4"),
        pod("low", priority=1, cpu="4", node="n"),
        pod("p", priority=HIGH, cpu="1", requests={"example.com/fpga": "1"}),
    ]
    assert "Insufficient example.com/fpga" in unresolved(outcomes(objects))["default/p"]


def test_zero_requests_fit_an_overcommitted_node_but_pod_count_still_counts():
    objects = [node("n", cpu="1", pods=2), pod("a", priority=1, cpu="2", node="n"), pod("p", priority=HIGH)]
    assert decided(outcomes(objects)) == {} and unresolved(outcomes(objects)) == {}
    objects.insert(2, pod("b", priority=1, node="n"))
    assert decided(outcomes(objects)) == {"default/p": ("n", ["default/b"])}


@pytest.mark.parametrize(
    ("nominee_priority", "fits"),
    [(HIGH, False), (HIGH + 1, False), (HIGH - 1, True)],
)
def test_nominated_pods_of_equal_or_higher_priority_hold_their_node(nominee_priority, fits):
    objects = [
        node("n", cpu="4"),
        pod("nominee", priority=nominee_priority, cpu="4", nominated="n"),
        pod("p", priority=HIGH, cpu="4"),
    ]
    result = outcomes(objects)
    p_outcome = unresolved(result).get("default/p") or decided(result).get("default/p")
    if fits:
        assert p_outcome is None  # fits without preemption: no decision
    else:
        assert "default/p" in unresolved(result)


def test_init_containers_and_overhead_count():
    p = pod("p", priority=HIGH, cpu="1")
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "3"}}}]
    p["spec"]["overhead"] = {"cpu": "500m"}
    objects = [node("n", cpu="4"), pod("a", priority=1, cpu="1", node="n"), p]
    # effective request 3.5 > 3 free: the pod needs a victim
    assert decided(outcomes(objects)) == {"default/p": ("n", ["default/a"])}
