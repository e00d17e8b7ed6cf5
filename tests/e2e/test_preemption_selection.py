"""The policies that shape *where* a pod preempts, live: a control plane in the preemptor mode
(tests/e2e/preemptor_side.py: kube-scheduler's preemption, shaped by the preempt extender the
controller serves) whose controller runs

    --victim-selection single,multiple --single-victim-deviation=30 --max-victims=2
    --victim-classes --opt-out-mode soft

(YuniKorn's simple preemptor: one victim whose request is within 30% of the preemptor's,
closest first, else the fewest victims, at most 2; victims by class, regular pods before
owner/driver pods before opted-out ones). The flags do not interfere: the strategies decide
where, the classes only order victims the strategies rank equal otherwise, and only the
class scenarios have owner or opted-out pods. Two kwok nodes of 4 cpu; every victim is the
tenant's pod, and each node is full (its pods' requests add up to its cpu), so pods must go."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s

from localcluster.objects import NODE_PREFIX
from priogate.preemption_record import OPT_OUT_LABEL, SCHEDULER_REASON
from tests.builders import pod
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import Side, millicpu, preemptor_cluster
from tests.e2e.tenant import Tenant

DEVIATION = 30
MAX_VICTIMS = 2
PREEMPTS_WITHIN = 60.0  # kube-scheduler's first attempt, or a retry
NODE0, NODE1 = f"{NODE_PREFIX}0", f"{NODE_PREFIX}1"


@pytest.fixture(scope="module")
def selection_cluster_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with preemptor_cluster(
        tmp_path_factory,
        "selection",
        "--victim-selection=single,multiple",
        f"--single-victim-deviation={DEVIATION}",
        f"--max-victims={MAX_VICTIMS}",
        "--victim-classes",
        "--opt-out-mode=soft",
        node_cpu="4",
    ) as cluster:
        side = Side(cluster)
        yield side
        side.close()


@pytest.fixture
def side(selection_cluster_side: Side) -> Iterator[Side]:
    yield selection_cluster_side
    selection_cluster_side.end_scenario()


def fill_exactly(side: Side, tenant: Tenant, pods: dict[str, tuple[str, str, Fraction | None]]) -> list[str]:
    """name -> (node, class, cpu): the tenant's pods pinned to their nodes; a cpu of None
    takes what is left of the node's free cpu, so every node ends up full."""
    side.settle()
    free = side.free_cpu()
    names = []
    for name, (node, klass, cpu) in pods.items():
        amount = cpu if cpu is not None else free[node]
        free[node] -= amount
        names.append(side.place(tenant, name, node, klass, millicpu(amount)))
    assert not any(free.values()), f"every node should be full: {free}"
    side.wait_running(tenant.namespace, names, "the victims-to-be run")
    return names


def victims_taken(side: Side, namespace: str, names: list[str], what: str) -> dict[str, str]:
    wait_for(lambda: side.disruption(namespace, names), PREEMPTS_WITHIN, what, 0.2)
    return side.disruption(namespace, names)


def test_single_victim_selection_takes_the_victim_whose_request_is_closest_to_the_preemptors(side: Side):
    """A 1-cpu preemptor. Within 30%: `near` (1.1 cpu, 10% off, on node 0) and `mid` (1.25 cpu,
    25% off, on node 1); the others are far off. `near` has the higher priority of the two, so
    kube-scheduler's choice (the lowest priorities, pkg/scheduler/framework/plugins/
    defaultpreemption) would keep it and take a priority-10 pod; the single strategy takes the
    closest request."""
    low, lowish = side.priority_class("low", 10), side.priority_class("lowish", 20)
    high = side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    pods = fill_exactly(
        side,
        tenant,
        {
            "near": (NODE0, lowish, Fraction(11, 10)),
            "far0": (NODE0, low, None),
            "mid": (NODE1, low, Fraction(5, 4)),
            "far1": (NODE1, low, None),
        },
    )

    side.create(ns, "hi", high, cpu="1")
    taken = victims_taken(side, ns, pods, "the single strategy takes a victim")
    assert list(taken) == ["near"], taken
    side.wait_running(ns, ["hi"], "the preemptor runs")
    assert (side.pod(ns, "hi") or {})["spec"]["nodeName"] == NODE0
    assert all(side.running(ns, p) for p in pods if p != "near"), "one victim only"
    (event,) = [e for e in side.events(ns) if e["reason"] == "Preempted" and e["regarding"]["name"] == "near"]
    uid = (side.pod(ns, "hi") or {})["metadata"]["uid"]
    assert event["reportingController"] == "default-scheduler" and uid in event["note"], event


def _daemonset(name: str, node: str, klass: str) -> dict[str, Any]:
    """A DaemonSet for `node` alone: its controller makes one pod pinned there by required node
    affinity on metadata.name (pkg/controller/daemon/util, ReplaceDaemonSetPodNodeNameNodeAffinity)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": klass,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def test_a_daemonset_pods_victims_are_on_its_node_even_when_a_cheaper_victim_is_elsewhere(side: Side):
    """Node 0 holds priority-100 pods, node 1 priority-10 ones of the same sizes: any other pod
    takes node 1's (the control at the end shows it). The DaemonSet's pod for node 0 takes node
    0's."""
    cheap, dear = side.priority_class("cheap", 10), side.priority_class("dear", 100)
    high = side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    pods = fill_exactly(
        side,
        tenant,
        {
            "own": (NODE0, dear, Fraction(1)),
            "big0": (NODE0, dear, None),
            "cheap": (NODE1, cheap, Fraction(1)),
            "big1": (NODE1, cheap, None),
        },
    )

    k8s.AppsV1Api(tenant.api_client).create_namespaced_daemon_set(ns, _daemonset("agent", NODE0, high))

    def agent() -> dict[str, Any] | None:
        found = side.client.get(f"/api/v1/namespaces/{ns}/pods", query=[("labelSelector", "app=agent")])
        items = found["items"]
        return items[0] if len(items) == 1 else None

    wait_for(lambda: agent() is not None, 60, "the DaemonSet controller creates the node's pod")
    terms = agent()["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]  # type: ignore[index]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE0]

    taken = victims_taken(side, ns, pods, "the DaemonSet pod preempts")
    assert list(taken) == ["own"], taken
    wait_for(
        lambda: (agent() or {}).get("status", {}).get("phase") == "Running",
        90,
        "the DaemonSet pod runs on its node",
    )
    assert side.running(ns, "cheap") and side.running(ns, "big1"), "a victim on another node"

    # The control: a pod that may go anywhere takes the cheaper pod on node 1.
    side.create(ns, "hi", high, cpu="1")
    wait_for(lambda: "cheap" in side.disruption(ns, ["cheap"]), PREEMPTS_WITHIN, "any pod takes node 1's")
    side.wait_running(ns, ["hi"], "the control pod runs")


def test_without_a_close_single_victim_multiple_takes_the_fewest_victims_and_at_most_max_victims(
    side: Side,
):
    """A 2-cpu pod: no pod is within 30% of 2 cpu, so `single` finds none and `multiple`
    decides. Node 0 holds four 1-cpu pods of priority 20, node 1 eight 0.5-cpu pods of priority
    10: kube-scheduler would take four of node 1's (the lowest priority wins first); `multiple`
    takes two of node 0's (the fewest). Then a 3-cpu pod: only node 1 could make room, with six
    victims, more than --max-victims: it stays pending."""
    low, lowish = side.priority_class("low", 10), side.priority_class("lowish", 20)
    high = side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    layout = {f"a{i}": (NODE0, lowish, Fraction(1)) for i in range(4)}
    layout.update({f"b{i}": (NODE1, low, Fraction(1, 2)) for i in range(8)})
    pods = fill_exactly(side, tenant, layout)

    side.create(ns, "hi", high, cpu="2")
    taken = side.disrupted_until_running(ns, pods, "hi", PREEMPTS_WITHIN + 30)
    assert len(taken) == 2 and set(taken) <= {f"a{i}" for i in range(4)}, taken
    assert (side.pod(ns, "hi") or {})["spec"]["nodeName"] == NODE0

    side.create(ns, "big", high, cpu="3")
    wait_for(lambda: side.unschedulable(ns, "big"), 30, "kube-scheduler marks the 3-cpu pod unschedulable")
    # Absence, bounded by kube-scheduler's own work: it asked the extender twice more (its
    # first attempt and a retry), which kept no node each time, and still no new victim.
    asked = side.answers("dropped-all")
    wait_for(
        lambda: side.answers("dropped-all") >= asked + 2, 60, "kube-scheduler asks the extender twice more"
    )
    remaining = [p for p in pods if p not in taken]
    assert not side.disruption(ns, remaining), "a victim beyond --max-victims"
    assert all(side.running(ns, p) for p in remaining)
    assert not (side.pod(ns, "big") or {})["spec"].get("nodeName")


def _keep_the_rest(side: Side, tenant: Tenant, keep: str, node: str) -> str:
    """A pod of a class above every preemptor here taking what is left of the node's cpu (the
    node's other pods must be bound already: free_cpu counts bound pods)."""
    left = side.free_cpu()[node]
    return side.place(tenant, f"keep-{node.removeprefix(NODE_PREFIX)}", node, keep, millicpu(left))


def test_victim_classes_take_a_regular_pod_before_a_driver_pod(side: Side):
    """`regular` and `driver` (named in the ownerReferences of `executor`, as a Spark driver is)
    are alike but for their start: kube-scheduler's order takes the later started, `driver`;
    --victim-classes takes `regular`."""
    low, keep = side.priority_class("low", 10), side.priority_class("keep", 5000)
    high = side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    side.settle()
    side.place(tenant, "regular", NODE0, low, "1")
    side.wait_running(ns, ["regular"], "the regular pod runs")
    time.sleep(1.1)  # status.startTime has a resolution of one second: the driver starts later
    side.place(tenant, "driver", NODE0, low, "1")
    side.wait_running(ns, ["driver"], "the driver runs")
    driver_uid = (side.pod(ns, "driver") or {})["metadata"]["uid"]
    executor = pod(
        "executor",
        namespace=None,
        cpu="100m",
        priority_class=low,
        node_selector={"kubernetes.io/hostname": NODE1},
    )
    executor["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": driver_uid}
    ]
    tenant.core.create_namespaced_pod(ns, executor)
    side.wait_running(ns, ["executor"], "the executor runs")
    rest = [_keep_the_rest(side, tenant, keep, NODE0), _keep_the_rest(side, tenant, keep, NODE1)]
    side.wait_running(ns, rest, "the rest runs")

    side.create(ns, "hi", high, cpu="1", node_selector={"kubernetes.io/hostname": NODE0})
    taken = victims_taken(side, ns, ["regular", "driver", "executor"], "a pod is preempted")
    assert list(taken) == ["regular"], taken
    side.wait_running(ns, ["hi"], "the preemptor runs")
    assert side.running(ns, "driver") and side.running(ns, "executor")


def test_soft_opt_out_takes_an_opted_out_pod_last_and_only_when_nothing_else_works(side: Side):
    """`opted-out` (labelled priogate.io/allow-preemption=false) has the lower priority, so
    kube-scheduler would take it first, and --opt-out-mode hard never
    (test_pod_preemptor.py). Soft mode takes `regular` first; the next pod, with only
    `opted-out` left to take, takes it."""
    low, lowish = side.priority_class("low", 10), side.priority_class("lowish", 20)
    keep, high = side.priority_class("keep", 5000), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    side.settle()
    side.place(tenant, "opted-out", NODE0, low, "1", labels={OPT_OUT_LABEL: "false"})
    side.place(tenant, "regular", NODE0, lowish, "1")
    side.wait_running(ns, ["opted-out", "regular"], "the pods run")
    side.wait_running(ns, [_keep_the_rest(side, tenant, keep, NODE0)], "the rest runs")
    pinned = {"kubernetes.io/hostname": NODE0}

    side.create(ns, "first", high, cpu="1", node_selector=pinned)
    taken = victims_taken(side, ns, ["opted-out", "regular"], "the first pod preempts")
    assert list(taken) == ["regular"], taken
    side.wait_running(ns, ["first"], "the first pod runs")
    assert side.running(ns, "opted-out")

    side.create(ns, "second", high, cpu="1", node_selector=pinned)
    taken = victims_taken(side, ns, ["opted-out"], "the second pod takes the opted-out pod")
    assert taken == {"opted-out": SCHEDULER_REASON}, taken
    side.wait_running(ns, ["second"], "the second pod runs")
