"""The MutatingAdmissionPolicy that resolves the common pod's priority inside kube-apiserver, with
the built-in Priority plugin replaced (priogate/priority_table.py says what it covers and why).

It runs before every mutating webhook (MutatingAdmissionPolicy precedes MutatingAdmissionWebhook
in kube-apiserver's plugin order, pkg/kubeapiserver/options/plugins.go), so the pod priority
hook's matchConditions see its result: a pod it resolved carries both fields and no mark, and is
not sent to the hook; a pod it marked is.
"""

from __future__ import annotations

from typing import Any

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

# CEL, evaluated per pod CREATE with the table as `params`. The variables are evaluated lazily
# against the object as it stands, so one mutation both decides and patches.
_VARIABLES = (
    # A ConfigMap without data (the placeholder) has no `data` field at all.
    ("table", "params.?data.orValue({})"),
    ("named", "object.spec.?priorityClassName.orValue('')"),
    (
        "className",
        f"variables.named != '' ? variables.named : variables.table.?{DEFAULT_KEY}.orValue('')",
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

_PATCH = (
    "variables.resolvable"
    " ? [JSONPatch{op: 'add', path: '/spec/priority', value: int(variables.entry.value().split(' ')[0])},"
    "    JSONPatch{op: 'add', path: '/spec/preemptionPolicy', value: variables.entry.value().split(' ')[1]}]"
    "   + (variables.named == '' && variables.className != ''"
    "      ? [JSONPatch{op: 'add', path: '/spec/priorityClassName', value: variables.className}] : [])"
    " : has(object.metadata.annotations)"
    f" ? [JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('{MARKER_ANNOTATION}'),"
    "    value: 'true'}]"
    f" : [JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'{MARKER_ANNOTATION}': 'true'}}}}]"
)


def priority_policies(table_namespace: str) -> list[dict[str, Any]]:
    """[MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding] reading the table in
    `table_namespace` (where the controller writes it)."""
    policy = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/name": "priogate"}},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
                "matchPolicy": "Equivalent",
            },
            # A CEL error (a hand-edited table) refuses the create, as the hook's Fail would.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "variables": [{"name": n, "expression": e} for n, e in _VARIABLES],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _PATCH}}],
        },
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/name": "priogate"}},
        "spec": {
            "policyName": POLICY_NAME,
            # Without the table (deleted by hand) the policy is skipped: no mark, so only a pod
            # without its fields reaches the hook (its matchConditions); the install ships the
            # table and the controller rewrites it on every resync.
            "paramRef": {
                "name": TABLE_NAME,
                "namespace": table_namespace,
                "parameterNotFoundAction": "Allow",
            },
        },
    }
    return [policy, binding]
