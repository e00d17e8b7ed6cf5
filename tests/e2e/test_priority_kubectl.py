"""The issue's "Must show" list, through kubectl against the real kube-apiserver with the built-in
Priority plugin disabled and priogate registered (the test run's default mode): whatever sets
spec.priority here is priogate, because nothing else in the request path does."""

from __future__ import annotations

import json
import re

from localcluster.api import metric_sum
from tests import builders
from tests.e2e.helpers import PAUSE, SYSTEM_CLASSES, wait_for
from webhook.policy import PRIORITY_HOOKS

PC_WEBHOOK = "priorityclasses.priogate.io"
POD_WEBHOOK = "pod-priority.priogate.io"


def _webhook_calls(kubectl, hook: str, operation: str) -> float:
    """kube-apiserver's own count of successful calls to one webhook, read through kubectl."""
    text = kubectl("get", "--raw", "/metrics").stdout
    labels = {"name": hook, "operation": operation, "code": "200"}
    return metric_sum(text, "apiserver_admission_webhook_request_total", labels)


def _no_global_default(scheduling) -> None:
    defaults = [pc.metadata.name for pc in scheduling.list_priority_class().items if pc.global_default]
    assert not defaults, f"a globalDefault class is left over from another test: {defaults}"


def test_priorityclasses_are_applied_through_the_webhook(kubectl, classes, scheduling):
    name = classes.name("applied")
    before = _webhook_calls(kubectl, PC_WEBHOOK, "CREATE")
    out = kubectl.apply(
        [builders.priority_class(name, value=1234, description="applied by kubectl", preemption_policy=None)]
    )
    assert f"priorityclass.scheduling.k8s.io/{name} created" in out.stdout
    assert _webhook_calls(kubectl, PC_WEBHOOK, "CREATE") > before, "kube-apiserver did not call the webhook"
    stored = scheduling.read_priority_class(name)
    assert (stored.value, stored.preemption_policy) == (1234, "PreemptLowerPriority")
    # A re-apply with a changed description is an UPDATE through the webhook as well.
    before = _webhook_calls(kubectl, PC_WEBHOOK, "UPDATE")
    out = kubectl.apply(
        [builders.priority_class(name, value=1234, description="changed", preemption_policy=None)]
    )
    assert "configured" in out.stdout
    assert _webhook_calls(kubectl, PC_WEBHOOK, "UPDATE") > before


def test_second_global_default_is_refused_with_upstreams_message(kubectl, classes, scheduling, admission):
    _no_global_default(scheduling)
    first, second = classes.name("default-a"), classes.name("default-b")
    kubectl.apply([builders.priority_class(first, value=100, default=True, preemption_policy=None)])
    admission.wait_sees({first: 100}, default=(100, first))
    out = kubectl.apply(
        [builders.priority_class(second, value=200, default=True, preemption_policy=None)], check=False
    )
    assert out.returncode != 0
    assert f'priorityclasses.scheduling.k8s.io "{second}" is forbidden' in out.stderr
    assert f"PriorityClass {first} is already marked as default. Only one default can exist" in out.stderr
    assert f'admission webhook "{PC_WEBHOOK}" denied the request' in out.stderr


def test_user_class_above_one_billion_is_refused(kubectl, classes):
    name = classes.name("too-high")
    out = kubectl.apply(
        [builders.priority_class(name, value=1_000_000_001, preemption_policy=None)], check=False
    )
    assert out.returncode != 0
    assert "maximum allowed value of a user defined priority is 1000000000" in out.stderr
    ok = classes.name("at-ceiling")
    kubectl.apply([builders.priority_class(ok, value=1_000_000_000, preemption_policy=None)])


def test_unknown_system_name_is_refused(kubectl, classes):
    name = classes.name("system-made-up")
    out = kubectl.apply([builders.priority_class(name, value=1000, preemption_policy=None)], check=False)
    assert out.returncode != 0
    assert "priority class names with 'system-' prefix are reserved for system use only" in out.stderr
    assert f"{name} is not a known system priority class" in out.stderr


def test_pods_get_priority_from_their_class_and_from_the_global_default(
    kubectl, classes, scheduling, admission, namespace
):
    _no_global_default(scheduling)
    named, default = classes.name("batch"), classes.name("fallback")
    kubectl.apply(
        [
            builders.priority_class(named, value=4242, preemption_policy=None),
            builders.priority_class(default, value=777, default=True, preemption_policy=None),
        ]
    )
    admission.wait_sees({named: 4242, default: 777}, default=(777, default))
    kubectl.apply(
        [
            builders.pod("with-class", namespace=None, priority_class=named),
            builders.pod("without-class", namespace=None),
        ],
        namespace,
    )
    pods = {p: kubectl.json("-n", namespace, "get", "pod", p) for p in ("with-class", "without-class")}
    assert (pods["with-class"]["spec"]["priority"], pods["with-class"]["spec"]["priorityClassName"]) == (
        4242,
        named,
    )
    assert pods["with-class"]["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert (
        pods["without-class"]["spec"]["priority"],
        pods["without-class"]["spec"]["priorityClassName"],
    ) == (
        777,
        default,
    )


def test_pod_in_a_test_namespace_is_scheduled_and_running(kubectl, classes, admission, namespace):
    name = classes.name("runs")
    kubectl.apply([builders.priority_class(name, value=50, preemption_policy=None)])
    admission.wait_sees({name: 50})
    overrides = json.dumps({"spec": {"priorityClassName": name}})
    kubectl("-n", namespace, "run", "runner", f"--image={PAUSE}", f"--overrides={overrides}")

    def running() -> bool:
        pod = kubectl.json("-n", namespace, "get", "pod", "runner")
        return pod["status"].get("phase") == "Running" and bool(pod["spec"].get("nodeName"))

    wait_for(running, 60, "the pod is bound by kube-scheduler and Running on a kwok node")
    pod = kubectl.json("-n", namespace, "get", "pod", "runner")
    assert pod["spec"]["priority"] == 50
    assert re.fullmatch(r"kwok-node-\d+", pod["spec"]["nodeName"])


def test_unknown_class_is_refused(kubectl, namespace):
    out = kubectl.apply(
        [builders.pod("orphan", namespace=None, priority_class="nope")], namespace, check=False
    )
    assert out.returncode != 0
    assert "Error from server (Forbidden)" in out.stderr
    assert "no PriorityClass with name nope was found" in out.stderr


def test_preemption_policy_never_propagates(kubectl, classes, admission, namespace):
    name = classes.name("polite")
    kubectl.apply([builders.priority_class(name, value=1_000_000, preemption_policy="Never")])
    admission.wait_sees({name: 1_000_000})
    kubectl.apply([builders.pod("polite-pod", namespace=None, priority_class=name)], namespace)
    pod = kubectl.json("-n", namespace, "get", "pod", "polite-pod")
    assert (pod["spec"]["priority"], pod["spec"]["preemptionPolicy"]) == (1_000_000, "Never")


def test_deleting_system_node_critical_is_refused(kubectl, scheduling):
    out = kubectl("delete", "priorityclass", "system-node-critical", check=False)
    assert out.returncode != 0
    assert 'priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden' in out.stderr
    assert "this is a system priority class and cannot be deleted" in out.stderr
    assert (
        scheduling.read_priority_class("system-node-critical").value == SYSTEM_CLASSES["system-node-critical"]
    )


def test_kube_system_is_not_exempt_when_the_plugin_is_disabled(kubectl, cluster):
    """Plugin disabled: priogate is the only resolver, so kube-system pods must reach its priority
    hooks too, and an outage must refuse rather than admit pods without a priority (docs/modes.md)."""
    assert cluster.mode.priority_plugin is False
    hooks = {}
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        hooks.update({h["name"]: h for h in kubectl.json("get", kind, "priogate")["webhooks"]})
    assert set(hooks) >= PRIORITY_HOOKS
    for name, hook in hooks.items():
        assert hook["failurePolicy"] == "Fail", name
        exempt = [
            v for e in hook.get("namespaceSelector", {}).get("matchExpressions", []) for v in e["values"]
        ]
        assert ("kube-system" in exempt) is (name not in PRIORITY_HOOKS), name
    name = "critical-probe"
    kubectl.apply(
        [builders.pod(name, namespace=None, priority_class="system-cluster-critical")], "kube-system"
    )
    pod = kubectl.json("-n", "kube-system", "get", "pod", name)
    kubectl("-n", "kube-system", "delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
    assert pod["spec"]["priority"] == SYSTEM_CLASSES["system-cluster-critical"]
