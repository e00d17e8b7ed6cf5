"""The ValidatingAdmissionPolicy that keeps a PriorityClass annotated
`priogate.io/allowed-namespaces` to the namespaces its selector matches, inside kube-apiserver,
in both modes (docs/priorityclass-policy.md).

Why a policy and not a hook: with the built-in Priority plugin kept, no priogate hook sees a pod
(the pod priority hook is not registered, webhook/policy.py), and a webhook's matchConditions
cannot read which classes are restricted, so a hook would cost a round trip on every pod create.
The policy reads the ConfigMap `priogate-class-access` (priogate/priority_table.py:
`allowed.<class>` and `selector.<class>`, written by the controller only while some class is
restricted) and the namespace's labels (`namespaceObject`), evaluates the selector in CEL, and
calls nothing. While no class is restricted the ConfigMap does not exist and kube-apiserver skips
the policy before evaluating it (parameterNotFoundAction Allow): the rule then costs nothing.

Why it covers every way a class is chosen: validating admission runs after every mutating step
(kube-apiserver's plugin order, pkg/kubeapiserver/options/plugins.go: ValidatingAdmissionPolicy
after MutatingAdmissionWebhook), so it sees the class the object ends up with, whether the
object named it, or the built-in plugin, priogate's in-process policies or hooks filled in the
globalDefault (admission.go admitPod and admitPodGroup write the default's name).
"""

from __future__ import annotations

from typing import Any

from priogate.label_selector import DOES_NOT_EXIST, EXISTS, IN, NOT_IN
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.priority_table import (
    ALLOWED_NAMESPACES_ANNOTATION,
    ALLOWED_PREFIX,
    CLASS_ACCESS_NAME,
    SELECTOR_PREFIX,
)
from webhook.priority_policy import API_VERSION, LABELS, binding

POLICY_NAME = "priogate-class-access"
VOLCANO_GROUP, VOLCANO_VERSION = GROUP_VERSION.split("/")
# Native PodGroups (KEP-4671); the rule matches nothing where the API is not served.
NATIVE_GROUP, NATIVE_VERSION = "scheduling.k8s.io", "v1alpha2"

# One requirement `r` of the compact form (priogate.label_selector.encode): "<op> <key> <values>".
# An operator it does not know (label_selector.NEVER, an unparsable selector) matches nothing.
_OP, _KEY, _VALUES = "r.split(' ')[0]", "r.split(' ')[1]", "r.split(' ')[2].split(',')"
_REQUIREMENT = (
    f"{_OP} == '{EXISTS}' ? {_KEY} in variables.labels"
    f" : {_OP} == '{DOES_NOT_EXIST}' ? !({_KEY} in variables.labels)"
    f" : {_OP} == '{IN}' ? ({_KEY} in variables.labels && variables.labels[{_KEY}] in {_VALUES})"
    f" : {_OP} == '{NOT_IN}' ? (!({_KEY} in variables.labels) || !(variables.labels[{_KEY}] in {_VALUES}))"
    " : false"
)

# An update that keeps the class (the controller's status and phase writes, most clients') is
# not evaluated at all.
MATCH_CONDITIONS = (
    (
        "create-or-class-change",
        "request.operation == 'CREATE'"
        " || (has(object.spec) ? object.spec.?priorityClassName.orValue('') : '')"
        " != (has(oldObject.spec) ? oldObject.spec.?priorityClassName.orValue('') : '')",
    ),
)

VARIABLES = (
    ("table", "params.?data.orValue({})"),
    ("className", "has(object.spec) ? object.spec.?priorityClassName.orValue('') : ''"),
    (
        "requirements",
        "variables.className == '' ? optional.none()"
        f" : variables.table[?'{ALLOWED_PREFIX}' + variables.className]",
    ),
    ("labels", "namespaceObject.metadata.?labels.orValue({})"),
)

EXPRESSION = (
    "!variables.requirements.hasValue() || variables.requirements.value() == ''"
    f" || variables.requirements.value().split(';').all(r, {_REQUIREMENT})"
)

MESSAGE = (
    "'PriorityClass ' + variables.className + ' may not be used in namespace '"
    " + namespaceObject.metadata.name"
    f" + ': the class is restricted by its annotation {ALLOWED_NAMESPACES_ANNOTATION}'"
    " + ' to namespaces matching \"'"
    f" + variables.table[?'{SELECTOR_PREFIX}' + variables.className].orValue('') + '\"'"
)


def class_access_policies(table_namespace: str, exempt_namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """[ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding] over CREATEs of pods, Volcano
    PodGroups and native PodGroups, and the UPDATEs of a Volcano PodGroup that change its class
    (the PodGroup defaults hook resolves a changed class, webhook/rules/podgroup_defaults.py;
    a pod's and a native PodGroup's class are immutable). Without its ConfigMap (no class
    restricted, or deleted by hand until the controller's next resync) the policy is skipped
    (parameterNotFoundAction Allow): refusing instead would refuse every pod create."""
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]},
        {
            "apiGroups": [VOLCANO_GROUP],
            "apiVersions": [VOLCANO_VERSION],
            "resources": [PLURAL],
            "operations": ["CREATE", "UPDATE"],
        },
        {
            "apiGroups": [NATIVE_GROUP],
            "apiVersions": [NATIVE_VERSION],
            "resources": ["podgroups"],
            "operations": ["CREATE"],
        },
    ]
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": dict(LABELS)},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [{**r, "scope": "Namespaced"} for r in rules],
                "matchPolicy": "Equivalent",
            },
            # Only a hand-edited ConfigMap can make the CEL fail: refuse rather than admit unchecked.
            "failurePolicy": "Fail",
            "matchConditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
            "variables": [{"name": n, "expression": e} for n, e in VARIABLES],
            "validations": [{"expression": EXPRESSION, "messageExpression": MESSAGE, "reason": "Forbidden"}],
        },
    }
    # kube-system's and priogate's own pods are never refused a class: a selector that forgot
    # them must not stop the control plane or priogate itself.
    return [
        policy,
        binding(
            "ValidatingAdmissionPolicyBinding",
            POLICY_NAME,
            CLASS_ACCESS_NAME,
            table_namespace,
            "Allow",
            exempt_namespaces,
            validationActions=["Deny"],
        ),
    ]
