"""The MutatingAdmissionPolicies that resolve the common pod's priority (with the built-in
Priority plugin replaced) and the common PodGroup's defaults and class (in either mode) inside
kube-apiserver, from the PriorityClass table (priogate/priority_table.py says what it covers and
why).

They run before every mutating webhook (MutatingAdmissionPolicy precedes
MutatingAdmissionWebhook in kube-apiserver's plugin order, pkg/kubeapiserver/options/plugins.go),
so the hooks' matchConditions see their result: an object a policy resolved is complete and
unmarked, and is not sent to the hook; an object it marked is.
"""

from __future__ import annotations

from typing import Any

from priogate.namespace_default import ANNOTATION as NAMESPACE_DEFAULT_ANNOTATION
from priogate.podgroup import DEFAULT_MIN_MEMBER, DEFAULT_QUEUE, GROUP_VERSION, PLURAL
from priogate.priority import DEFAULT_PRIORITY_WITHOUT_DEFAULT_CLASS, PREEMPT_LOWER_PRIORITY
from priogate.priority_table import (
    CLASS_PREFIX,
    COMPLETE_KEY,
    DEFAULT_KEY,
    MARKER_ANNOTATION,
    TABLE_NAME,
)

POLICY_NAME = "priogate-pod-priority"
API_VERSION = "admissionregistration.k8s.io/v1"
GROUP, VERSION = GROUP_VERSION.split("/")

# The namespace's default class (priogate.namespace_default), "" without one. `namespaceObject`
# is the request's namespace from kube-apiserver's namespace informer (KEP-3488, the CEL
# admission environment), so it lags an annotation change as the webhook's own cache does. It is
# read only for an object that names no class (the variables are lazy).
_NAMESPACE_DEFAULT = f"namespaceObject.metadata.?annotations[?'{NAMESPACE_DEFAULT_ANNOTATION}'].orValue('')"

# CEL, evaluated per pod CREATE with the table as `params`. The variables are evaluated lazily
# against the object as it stands, so one mutation both decides and patches.
_VARIABLES = (
    # A ConfigMap without data (the placeholder) has no `data` field at all.
    ("table", "params.?data.orValue({})"),
    ("named", "object.spec.?priorityClassName.orValue('')"),
    ("namespaceDefault", f"variables.named != '' ? '' : {_NAMESPACE_DEFAULT}"),
    # The named class, else the namespace's default, else the globalDefault. A namespace default
    # the table lacks (a missing class among them) leaves no entry: the pod is marked, and the
    # hook resolves it or refuses it naming the annotation.
    (
        "className",
        "variables.named != '' ? variables.named"
        " : variables.namespaceDefault != '' ? variables.namespaceDefault"
        f" : variables.table.?{DEFAULT_KEY}.orValue('')",
    ),
    # "<value> <policy>", or none for a class the table does not hold.
    (
        "entry",
        "variables.className == '' "
        f"? optional.of('{DEFAULT_PRIORITY_WITHOUT_DEFAULT_CLASS} {PREEMPT_LOWER_PRIORITY}') "
        f": variables.table[?'{CLASS_PREFIX}' + variables.className]",
    ),
    # Only the case with nothing to check: a preset value must be compared with the class's, and
    # the hook words that refusal exactly as the plugin does (admission.go admitPod).
    (
        "resolvable",
        f"variables.table.?{COMPLETE_KEY}.orValue('') == 'true' && variables.entry.hasValue()"
        " && !has(object.spec.priority) && !has(object.spec.preemptionPolicy)",
    ),
)

# The mark that sends an object to the hook, added to whatever annotations it has.
_MARK = (
    "(has(object.metadata.annotations)"
    f" ? [JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('{MARKER_ANNOTATION}'),"
    "    value: 'true'}]"
    f" : [JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'{MARKER_ANNOTATION}': 'true'}}}}])"
)

_PATCH = (
    "variables.resolvable"
    " ? [JSONPatch{op: 'add', path: '/spec/priority', value: int(variables.entry.value().split(' ')[0])},"
    "    JSONPatch{op: 'add', path: '/spec/preemptionPolicy', value: variables.entry.value().split(' ')[1]}]"
    "   + (variables.named == '' && variables.className != ''"
    "      ? [JSONPatch{op: 'add', path: '/spec/priorityClassName', value: variables.className}] : [])"
    f" : {_MARK}"
)


LABELS = {"app.kubernetes.io/name": "priogate"}


def binding(
    kind: str,
    name: str,
    param: str,
    table_namespace: str,
    param_not_found: str,
    exempt_namespaces: tuple[str, ...],
    **spec: Any,
) -> dict[str, Any]:
    """The `kind` binding of policy `name` to its ConfigMap parameter `param`, outside the
    exempt namespaces (those the hook it stands beside is not called for either,
    webhook.policy); `spec` adds fields such as validationActions."""
    body: dict[str, Any] = {
        "policyName": name,
        "paramRef": {"name": param, "namespace": table_namespace, "parameterNotFoundAction": param_not_found},
        **spec,
    }
    if exempt_namespaces:
        selector = {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": list(exempt_namespaces),
        }
        body["matchResources"] = {"namespaceSelector": {"matchExpressions": [selector]}}
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": body,
    }


def _policy_pair(
    name: str,
    resource_rule: dict[str, Any],
    variables: tuple[tuple[str, str], ...],
    patch: str,
    table_namespace: str,
    *,
    param_not_found: str,
    exempt_namespaces: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """[MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding]: one JSONPatch mutation over
    CREATEs of `resource_rule`, with the table in `table_namespace` as `params`."""
    policy = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [{**resource_rule, "operations": ["CREATE"], "scope": "Namespaced"}],
                "matchPolicy": "Equivalent",
            },
            # A CEL error (a hand-edited table) refuses the create, as the hook's Fail would.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
        },
    }
    return [
        policy,
        binding(
            "MutatingAdmissionPolicyBinding",
            name,
            TABLE_NAME,
            table_namespace,
            param_not_found,
            exempt_namespaces,
        ),
    ]


def priority_policies(table_namespace: str) -> list[dict[str, Any]]:
    """The pod policy and its binding, reading the table in `table_namespace` (where the
    controller writes it). Without the table (deleted by hand) the policy is skipped: no mark,
    so only a pod without its fields reaches the hook (its matchConditions); the install ships
    the table and the controller rewrites it on every resync."""
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    return _policy_pair(POLICY_NAME, pods, _VARIABLES, _PATCH, table_namespace, param_not_found="Allow")


# ---- PodGroups ------------------------------------------------------------------------------
# webhook/rules/podgroup_defaults.py on CREATE, for the common group, inside kube-apiserver: the
# defaults (minMember 1, queue "default"), and a class either named and in the table, or none
# (then the namespace's default if the table holds it, else the globalDefault's name, if the
# table has one). Every other CREATE (a class the table
# lacks, a table not yet complete, no spec) is marked and left to the hook, which resolves it
# as before, refuses an unknown class with the pod rule's words, and removes the mark. What a
# hook round trip on every PodGroup create cost: docs/modes.md.
PODGROUP_POLICY_NAME = "priogate-podgroup-defaults"

_PODGROUP_VARIABLES = (
    ("table", "params.?data.orValue({})"),
    ("named", "has(object.spec) ? object.spec.?priorityClassName.orValue('') : ''"),
    ("namespaceDefault", f"variables.named != '' ? '' : {_NAMESPACE_DEFAULT}"),
    # The class to check: the named one, else the namespace's default (a group without either
    # takes the globalDefault's name, or none, and needs no check).
    (
        "checked",
        "variables.named != '' ? variables.named : variables.namespaceDefault",
    ),
    (
        "resolvable",
        f"has(object.spec) && variables.table.?{COMPLETE_KEY}.orValue('') == 'true'"
        f" && (variables.checked == '' || variables.table[?'{CLASS_PREFIX}' + variables.checked].hasValue())",
    ),
    (
        "defaultClass",
        "variables.namespaceDefault != '' ? variables.namespaceDefault"
        f" : variables.table.?{DEFAULT_KEY}.orValue('')",
    ),
)

_PODGROUP_PATCH = (
    "variables.resolvable"
    " ? (has(object.spec.minMember) ? []"
    f"    : [JSONPatch{{op: 'add', path: '/spec/minMember', value: {DEFAULT_MIN_MEMBER}}}])"
    "   + (object.spec.?queue.orValue('') != '' ? []"
    f"    : [JSONPatch{{op: 'add', path: '/spec/queue', value: '{DEFAULT_QUEUE}'}}])"
    "   + (variables.named == '' && variables.defaultClass != ''"
    "      ? [JSONPatch{op: 'add', path: '/spec/priorityClassName', value: variables.defaultClass}] : [])"
    f" : {_MARK}"
)


def podgroup_policies(table_namespace: str, exempt_namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """The PodGroup policy and its binding. Without the table the binding refuses PodGroup
    creates (parameterNotFoundAction Deny) until the controller writes it again: the hook is
    called only for what the policy marks or leaves incomplete, so a skipped policy would let a
    complete group through unchecked."""
    podgroups = {"apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [PLURAL]}
    return _policy_pair(
        PODGROUP_POLICY_NAME,
        podgroups,
        _PODGROUP_VARIABLES,
        _PODGROUP_PATCH,
        table_namespace,
        param_not_found="Deny",
        exempt_namespaces=exempt_namespaces,
    )
