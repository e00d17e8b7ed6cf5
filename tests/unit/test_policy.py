"""The mode policy (docs/modes.md) as the generated configurations carry it, hook by hook.

HOOKS is the cost table: for each mode, every hook kube-apiserver calls, with what keeps it off
requests it cannot change (namespaces, object selector, CEL matchConditions, operations). A new
hook, or a hook that loses a condition, fails here until the table says why it is called.
"""

from __future__ import annotations

from typing import Any

import pytest

from priogate.namespace_default import LABEL as DEFAULT_CLASS_LABEL
from priogate.priority_table import TABLE_NAME
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from webhook.configuration import policy_objects, webhook_configurations
from webhook.policy import BUILTIN_EQUIVALENT_HOOKS, PRIORITY_HOOKS, HookPolicy, WebhookPolicy
from webhook.priority_policy import PODGROUP_POLICY_NAME, POLICY_NAME
from webhook.registry import load_rule_sets

SYSTEM = ["kube-system", "priogate-system"]
KEPT, REPLACED = True, False  # the built-in Priority plugin


# What a hook requires of a namespace's enrolment label (priogate.scope): enrolled namespaces
# only (where reservations are or were), not-enrolled ones only, or any.
ENROLLED = [{"key": ENROLLED_LABEL, "operator": "In", "values": [ENROLLED_VALUE]}]
NOT_ENROLLED = [{"key": ENROLLED_LABEL, "operator": "NotIn", "values": [ENROLLED_VALUE]}]
ANY: list[dict[str, Any]] = []
DEFAULT_CLASS = [{"key": DEFAULT_CLASS_LABEL, "operator": "In", "values": ["true"]}]


def _selector(namespaces: list[str], labels: list[dict[str, Any]]) -> dict[str, Any] | None:
    expressions = list(labels)
    if namespaces:
        expressions.insert(
            0, {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": namespaces}
        )
    return {"matchExpressions": expressions} if expressions else None


# hook -> mode -> (exempt namespaces, enrolment requirement, matchCondition names, operations,
# failurePolicy); a mode missing from the inner dict: the hook is not registered in it. No hook
# has an objectSelector.
HOOKS: dict[str, dict[bool, tuple[list[str], list[dict[str, Any]], list[str], list[str], str]]] = {
    "pod-priority.priogate.io": {
        # Kept: the plugin has already resolved and checked; the hook could only agree.
        REPLACED: ([], ANY, ["marked-or-priority-missing"], ["CREATE", "UPDATE"], "Fail"),
    },
    "native-podgroup-priority.priogate.io": {
        # As for pods; CREATE only (upstream resolves on CREATE, the fields are immutable).
        REPLACED: ([], ANY, [], ["CREATE"], "Fail"),
    },
    "priorityclasses.priogate.io": {
        # Both modes: deletecollection of the system classes, globalDefault warnings; replaced:
        # also the one-globalDefault rule. PriorityClass writes are rare: no condition.
        REPLACED: ([], ANY, [], ["CREATE", "UPDATE", "DELETE"], "Fail"),
        KEPT: (SYSTEM, ANY, [], ["CREATE", "UPDATE", "DELETE"], "Ignore"),
    },
    # A CREATE only when the in-process policy marked it or no policy made it complete (the test
    # below: the policy comes with the hook); an UPDATE only for a missing default or a new class.
    "podgroup-defaults.priogate.io": {
        mode: (SYSTEM, ANY, ["marked-or-defaults-missing-or-class-change"], ["CREATE", "UPDATE"], "Fail")
        for mode in (KEPT, REPLACED)
    },
    "podgroup-annotations.priogate.io": {
        mode: (SYSTEM, ANY, ["priogate-annotation-present"], ["CREATE", "UPDATE"], "Fail")
        for mode in (KEPT, REPLACED)
    },
    # Only where reservations are or were: the enrolment hook labels a namespace, and proves
    # kube-apiserver routes it here, before its first reservation is admitted.
    "podgroup-quota.priogate.io": {
        # No DELETE: a reservation ends when its group is confirmed gone, not at DELETE admission.
        mode: (SYSTEM, ENROLLED, [], ["CREATE", "UPDATE"], "Fail")
        for mode in (KEPT, REPLACED)
    },
    # Only a namespace's first claims: nowhere enrolled, and only PodGroups that reserve.
    "podgroup-enrolment.priogate.io": {
        mode: (SYSTEM, NOT_ENROLLED, ["claims-something"], ["CREATE", "UPDATE"], "Fail")
        for mode in (KEPT, REPLACED)
    },
    # Every namespace, enrolled or not (one may be enrolled before the next PodGroup), but only
    # creates and spec changes: quota changes are rare, status updates never come here.
    "resourcequota-fence.priogate.io": {
        mode: (SYSTEM, ANY, ["create-or-spec-change"], ["CREATE", "UPDATE"], "Fail")
        for mode in (KEPT, REPLACED)
    },
    # Pod creates in a namespace that never held a reservation cost no round trip.
    "pod-quota.priogate.io": {mode: (SYSTEM, ENROLLED, [], ["CREATE"], "Fail") for mode in (KEPT, REPLACED)},
    # Delay Pod Creation: only where PodGroups are (a matchCondition costs kube-apiserver a
    # conversion of the pod, a namespaceSelector does not), there only pods that name a PodGroup,
    # and only updates that lift priogate's gate.
    "pod-gate.priogate.io": {
        mode: (SYSTEM, ENROLLED, ["names-a-podgroup"], ["CREATE"], "Fail") for mode in (KEPT, REPLACED)
    },
    "pod-gate-guard.priogate.io": {
        mode: (SYSTEM, ENROLLED, ["lifts-the-gate"], ["UPDATE"], "Fail") for mode in (KEPT, REPLACED)
    },
    # Namespace writes only where the default-class label disagrees with its annotation: it puts
    # the label in step (priogate.namespace_default). Namespaces are written rarely.
    "namespace-default-label.priogate.io": {
        mode: (SYSTEM, ANY, ["label-out-of-step"], ["CREATE", "UPDATE"], "Fail") for mode in (KEPT, REPLACED)
    },
    # Kept only: pods in namespaces labelled for a default class (the label routes, so a pod
    # elsewhere pays no call and no CEL); replaced: the pod priority hook and its policy do it.
    "namespace-default-class.priogate.io": {KEPT: (SYSTEM, DEFAULT_CLASS, [], ["CREATE"], "Fail")},
    "namespace-default-native-podgroup.priogate.io": {KEPT: (SYSTEM, DEFAULT_CLASS, [], ["CREATE"], "Fail")},
    # The preemption preview: registered only when turned on (its matchCondition on dry runs
    # still costs every pod create kube-apiserver's conversion; tests/unit/test_preemption_preview.py).
    "preemption-preview.priogate.io": {},
    "podgroup-preemption-preview.priogate.io": {},
}


def hooks(priority_plugin: bool) -> dict[str, dict]:
    configs = webhook_configurations(
        "https://127.0.0.1:1", b"ca", policy=WebhookPolicy.for_mode(priority_plugin=priority_plugin)
    )
    return {h["name"]: h for c in configs for h in c["webhooks"]}


def test_the_table_covers_every_rule_set():
    assert set(HOOKS) == {r.name for r in load_rule_sets()}


@pytest.mark.parametrize("priority_plugin", [KEPT, REPLACED], ids=["plugin-kept", "plugin-replaced"])
def test_each_hook_is_called_only_where_it_can_change_the_answer(priority_plugin):
    registered = hooks(priority_plugin)
    expected = {name: modes[priority_plugin] for name, modes in HOOKS.items() if priority_plugin in modes}
    assert set(registered) == set(expected)
    for name, (exempt, labels, conditions, operations, failure) in expected.items():
        hook = registered[name]
        # The main resource's rule; subresource rules are checked by the test below.
        (rule,) = [r for r in hook["rules"] if not any("/" in res for res in r["resources"])]
        actual = (
            hook.get("namespaceSelector"),
            hook.get("objectSelector"),
            [c["name"] for c in hook.get("matchConditions", [])],
            rule["operations"],
            hook["failurePolicy"],
        )
        assert actual == (_selector(exempt, labels), None, conditions, operations, failure), name


@pytest.mark.parametrize("priority_plugin", [KEPT, REPLACED], ids=["plugin-kept", "plugin-replaced"])
def test_the_enrolment_proof_rests_on_identical_and_complementary_selectors(priority_plugin):
    # The probe proves the pod quota hook's routing by the reservation hook's (priogate.scope):
    # that holds only while their selectors are the same, and a namespace's first claim reaches
    # exactly one of the two PodGroup hooks only while the enrolment hook's is the complement.
    registered = hooks(priority_plugin)
    pods, reservations, enrolment = (
        registered[n]["namespaceSelector"]["matchExpressions"]
        for n in ("pod-quota.priogate.io", "podgroup-quota.priogate.io", "podgroup-enrolment.priogate.io")
    )
    assert pods == reservations
    (differs,) = [i for i, (a, b) in enumerate(zip(reservations, enrolment, strict=True)) if a != b]
    assert {reservations[differs]["operator"], enrolment[differs]["operator"]} == {"In", "NotIn"}
    assert reservations[differs]["values"] == enrolment[differs]["values"]


# The one subresource a hook needs: a resize changes a pod's requests, which the pod quota
# rule must check against the reservations.
SUBRESOURCES = {"pod-quota.priogate.io": {"pods/resize"}}


def test_no_hook_matches_a_subresource_it_does_not_need():
    # Status writes (the kubelet's, the controller's) must never reach a hook: `resources`
    # names only the main resource (and the listed subresources), so kube-apiserver filters them
    # before any CEL is evaluated.
    for name, hook in hooks(REPLACED).items():
        subresources = {r for rule in hook["rules"] for r in rule["resources"] if "/" in r}
        assert subresources == SUBRESOURCES.get(name, set()), name


def test_the_priority_hooks_are_the_rule_sets_the_plugin_also_enforces():
    assert {
        "pod-priority.priogate.io",
        "native-podgroup-priority.priogate.io",
        "priorityclasses.priogate.io",
    } == PRIORITY_HOOKS
    assert {"pod-priority.priogate.io", "native-podgroup-priority.priogate.io"} == BUILTIN_EQUIVALENT_HOOKS


def test_match_conditions_are_well_formed():
    # kube-apiserver refuses a configuration whose condition names repeat or are not qualified
    # names, and allows at most 64 per hook (admissionregistration v1 validation).
    for rule_set in load_rule_sets():
        names = [n for n, _ in rule_set.match_conditions]
        assert len(names) == len(set(names)) <= 64, rule_set.name
        assert all(n.replace("-", "").isalnum() and n.islower() and len(n) <= 63 for n in names), names
        assert all(e.count("(") == e.count(")") for _, e in rule_set.match_conditions), rule_set.name


def test_an_unknown_failure_policy_is_refused():
    with pytest.raises(ValueError, match="Fail or Ignore"):
        HookPolicy((), "Maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize("priority_plugin", [KEPT, REPLACED], ids=["plugin-kept", "plugin-replaced"])
def test_the_hooks_that_count_on_an_in_process_policy_come_with_it(priority_plugin):
    """The pod priority and PodGroup defaults hooks skip the CREATEs their policy resolved: each
    registered hook comes with its policy, bound where the hook is called (the same exempt
    namespaces), reading the table that comes with them, and refusing while that table is
    missing where a skipped policy would let a complete object through unchecked."""
    policy = WebhookPolicy.for_mode(priority_plugin=priority_plugin)
    registered = hooks(priority_plugin)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in policy_objects(policy, "priogate-system")}
    pairs = {"podgroup-defaults.priogate.io": PODGROUP_POLICY_NAME, "pod-priority.priogate.io": POLICY_NAME}
    for hook_name, policy_name in pairs.items():
        if hook_name not in registered:
            assert ("MutatingAdmissionPolicy", policy_name) not in objects
            continue
        binding = objects["MutatingAdmissionPolicyBinding", policy_name]["spec"]
        assert objects["MutatingAdmissionPolicy", policy_name]["spec"]["failurePolicy"] == "Fail"
        assert binding["paramRef"]["name"] == TABLE_NAME
        selector = binding.get("matchResources", {}).get("namespaceSelector")
        assert selector == registered[hook_name].get("namespaceSelector")
    assert ("ConfigMap", TABLE_NAME) in objects
    defaults = objects["MutatingAdmissionPolicyBinding", PODGROUP_POLICY_NAME]["spec"]["paramRef"]
    assert defaults["parameterNotFoundAction"] == "Deny"
