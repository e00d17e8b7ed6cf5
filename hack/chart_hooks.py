"""The chart's Helm hooks (hack/chart.py): the annotations of the caBundle Job's post-install hook,
and the objects only the chart has, the pre-install hooks that create the serving Secret and the
post-delete hooks that clean up after `helm uninstall`."""

from __future__ import annotations

import copy

HOOK_ANNOTATIONS = {
    # https://helm.sh/docs/topics/charts_hooks/
    "helm.sh/hook": "post-install,post-upgrade",
    # hook-succeeded: `helm uninstall` never deletes a hook, so a Job kept after it succeeded
    # would outlive the release (until its ttlSecondsAfterFinished); a failed one stays to be read.
    "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
}

# The serving Secret must exist before anything waits for it: the webhook's init container waits
# for it, and `helm install --wait` (and --atomic, Flux, Argo CD) waits for the webhook to be
# ready before it runs post-install hooks. So a pre-install/pre-upgrade Job creates it, under a
# ServiceAccount and Role that are pre-install hooks too (Helm creates hooks in weight order, then
# kind order, and waits for a Job hook to complete before the next weight and before the release's
# own objects: https://helm.sh/docs/topics/charts_hooks/#hook-weights). It only creates the
# Secret: the caBundle goes into configurations that do not exist yet, so that stays the
# post-install Job's. hook-succeeded removes all four once the Job is done (Helm deletes them
# after every hook of the phase has succeeded: helm/helm pkg/action/hooks.go, execHook), so
# `helm uninstall` has nothing of them to leave.
CERTS = "priogate-certs"
CERTS_HOOK = "pre-install,pre-upgrade"
CERTS_DELETE_POLICY = "before-hook-creation,hook-succeeded"
CERTS_RBAC_WEIGHT, CERTS_JOB_WEIGHT = "-10", "0"


def certs_hook_objects(objs: list[dict]) -> list[dict]:
    """The pre-install hook objects that create the serving Secret, derived from the base's
    caBundle Job and its namespaced RBAC (manifests/cabundle-job.yaml, manifests/rbac.yaml)."""
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}

    def hook(obj: dict, weight: str) -> dict:
        obj = copy.deepcopy(obj)
        obj["metadata"]["name"] = CERTS
        obj["metadata"].setdefault("annotations", {}).update(
            {
                "helm.sh/hook": CERTS_HOOK,
                "helm.sh/hook-weight": weight,
                "helm.sh/hook-delete-policy": CERTS_DELETE_POLICY,
            }
        )
        return obj

    sa = hook(by["ServiceAccount", "priogate-cabundle"], CERTS_RBAC_WEIGHT)
    role = hook(by["Role", "priogate-cabundle-certs"], CERTS_RBAC_WEIGHT)
    binding = hook(by["RoleBinding", "priogate-cabundle-certs"], CERTS_RBAC_WEIGHT)
    binding["roleRef"]["name"] = CERTS
    (subject,) = binding["subjects"]
    subject["name"] = CERTS
    job = hook(by["Job", "priogate-cabundle"], CERTS_JOB_WEIGHT)
    spec = job["spec"]["template"]["spec"]
    spec["serviceAccountName"] = CERTS
    (c,) = spec["containers"]
    c["command"].append("--no-inject-ca-bundle")
    return [sa, role, binding, job]


# `helm uninstall` deletes the release's objects, not what priogate's programs made in the release
# namespace: the serving Secret, the ledgers, the controller's Lease
# (certs/uninstall.py). A post-delete Job removes them, once the release's pods are gone, under
# a ServiceAccount and Role of its own that exist only while it runs (hook-succeeded).
CLEANUP = "priogate-cleanup"
CLEANUP_HOOK = "post-delete"
CLEANUP_RULES = [
    # Waits until no webhook or controller pod is left, so nothing writes after the deletes.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["priogate-webhook-tls"], "verbs": ["delete"]},
    # The ledgers are named after tenant namespaces, so not by name: ConfigMaps of the release
    # namespace, priogate's own (the Job lists them by their label and deletes those).
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "delete"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["priogate-controller"],
        "verbs": ["delete"],
    },
]


def cleanup_hook_objects(objs: list[dict]) -> list[dict]:
    """The post-delete hook objects (CLEANUP), derived from the base's caBundle Job."""
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    namespace = by["Job", "priogate-cabundle"]["metadata"]["namespace"]

    def hook(obj: dict, weight: str) -> dict:
        obj["metadata"] = {
            "name": CLEANUP,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "priogate", "app.kubernetes.io/component": "cleanup"},
            "annotations": {
                **obj["metadata"].get("annotations", {}),
                "helm.sh/hook": CLEANUP_HOOK,
                "helm.sh/hook-weight": weight,
                "helm.sh/hook-delete-policy": CERTS_DELETE_POLICY,
            },
        }
        return obj

    sa = hook({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {}}, CERTS_RBAC_WEIGHT)
    role = hook(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {}, "rules": CLEANUP_RULES},
        CERTS_RBAC_WEIGHT,
    )
    binding = hook(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLEANUP},
            "subjects": [{"kind": "ServiceAccount", "name": CLEANUP, "namespace": namespace}],
        },
        CERTS_RBAC_WEIGHT,
    )
    job = copy.deepcopy(by["Job", "priogate-cabundle"])
    job = hook(job, CERTS_JOB_WEIGHT)
    # kube-score's pod-networkpolicy: the Job runs after `helm uninstall` has deleted the
    # release's NetworkPolicies, so none could select it; it serves nothing.
    annotations = job["metadata"]["annotations"]
    annotations["kube-score/ignore"] += ",pod-networkpolicy"
    job["spec"]["backoffLimit"] = 3
    template = job["spec"]["template"]
    template["metadata"]["labels"]["app.kubernetes.io/component"] = "cleanup"
    spec = template["spec"]
    spec["serviceAccountName"] = CLEANUP
    (c,) = spec["containers"]
    c["name"] = "cleanup"
    c["command"] = ["python", "-m", "certs", "uninstall", f"--namespace={namespace}"]
    return [sa, role, binding, job]
