"""The chart's per-object templating (hack/chart.py): markers put into a parsed object where a
value becomes a Helm expression, and the objects that have such values, each with the function
that places its markers and the condition its template renders under."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import yaml

CONFIG_NAME = "priogate"  # webhook.configuration's default and the caBundle Job's --config-name
CLIENT_CA_DIR = "/etc/priogate/client-ca"  # docs/hardening.md

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


class Markers:
    """Marker strings put into an object before it is dumped, and the template text each becomes.

    value(): the marker replaces a scalar or a whole subtree; after dumping, the quoted marker is
    replaced by an inline expression (a flow-style JSON/YAML value is valid YAML).
    line(): the marker is a list item or a key whose whole line is replaced by template lines at
    the same indentation (for items that exist only under some values)."""

    def __init__(self) -> None:
        self.inline: dict[str, str] = {}
        self.lines: dict[str, Callable[[str], str]] = {}

    def value(self, expr: str) -> str:
        m = f"@@{len(self.inline) + len(self.lines)}@@"
        self.inline[m] = expr
        return m

    def line(self, block: Callable[[str], str]) -> str:
        m = f"@@{len(self.inline) + len(self.lines)}@@"
        self.lines[m] = block
        return m

    def apply(self, text: str) -> str:
        out = []
        for ln in text.splitlines():
            hit = next((m for m in self.lines if m in ln), None)
            if hit is not None:
                indent = ln[: len(ln) - len(ln.lstrip())]
                out.append(self.lines[hit](indent))
                continue
            for m, expr in self.inline.items():
                ln = ln.replace(f"'{m}'", expr).replace(m, expr)
            out.append(ln)
        return "\n".join(out) + "\n"


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=10_000)


def flow(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "))


def container(pod_spec: dict, name: str) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


# The built-in classes' values (k8s.io/kubernetes pkg/apis/scheduling/types.go,
# SystemCriticalPriority and the node-critical class above it).
SYSTEM_CLASS_VALUES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


def own_priority(pod_spec: dict, mk: Markers, component: str) -> None:
    """<component>.priorityClassName, and with the Priority plugin replaced the class's integer:
    the priority hooks then exempt the release namespace (webhook.policy.WebhookPolicy.in_cluster),
    so nothing there resolves a pod's priority and the template must carry it, or the scheduler
    would read 0. Only the built-in classes' values are known when the chart renders, so in that
    mode the class must be one of them. With the plugin kept, the plugin fills the integer in."""
    assert pod_spec["priorityClassName"] in SYSTEM_CLASS_VALUES
    v = f".Values.{component}.priorityClassName"
    known = " ".join(f'"{name}" {value}' for name, value in SYSTEM_CLASS_VALUES.items())
    pod_spec["priorityClassName"] = mk.value(f"{{{{ {v} }}}}")
    pod_spec[
        mk.line(
            lambda i: (
                "{{- if not .Values.priorityPlugin }}\n"
                f"{{{{- $value := get (dict {known}) {v} }}}}\n"
                f"{{{{- if not $value }}}}{{{{ fail (printf \"priorityPlugin=false: "
                f"{component}.priorityClassName must be one of {', '.join(SYSTEM_CLASS_VALUES)} "
                "(nothing resolves a class in the release namespace; docs/install.md), "
                f'not %q" {v}) }}}}{{{{ end }}}}\n'
                f"{i}priority: {{{{ $value }}}}\n{i}preemptionPolicy: PreemptLowerPriority\n"
                "{{- end }}"
            )
        )
    ] = 0


def template_webhook_deployment(d: dict, mk: Markers) -> None:
    d["spec"]["replicas"] = mk.value("{{ .Values.webhook.replicas }}")
    own_priority(d["spec"]["template"]["spec"], mk, "webhook")
    pod_scheduling(d["spec"]["template"]["spec"], mk, "webhook")
    deployment_strategy(d, mk, "webhook")
    spec = d["spec"]["template"]["spec"]
    # The preemption preview's server runs in the quota container where it is turned on.
    quota = container(spec, "quota")
    serve = quota["command"].index("--serve=quota")
    quota["command"][serve] = mk.value(
        "{{ if .Values.preemptionPreview }}--serve=quota,preview{{ else }}--serve=quota{{ end }}"
    )
    for name in ("priority", "quota"):
        c = container(spec, name)
        v = f".Values.webhook.{name}"
        c["resources"] = mk.value(f"{{{{ toJson {v}.resources }}}}")
        for env in c["env"]:
            if env["name"] == "PRIOGATE_WORKERS":
                env["value"] = mk.value(f"{{{{ {v}.workers | quote }}}}")
        # mTLS (docs/hardening.md): the servers require a client certificate from this CA on the
        # webhook ports. The probes and /metrics are on the plain-HTTP health ports, so they stay
        # as they are.
        c["command"].append(
            mk.line(
                lambda i: (
                    "{{- if .Values.mtls.clientCASecret }}\n"
                    f"{i}- --client-ca-file={CLIENT_CA_DIR}/{{{{ .Values.mtls.clientCAKey }}}}\n"
                    "{{- end }}"
                )
            )
        )
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["port"] == f"{name}-health", "probes go to the health port"
        c["volumeMounts"].append(
            mk.line(
                lambda i: (
                    "{{- if .Values.mtls.clientCASecret }}\n"
                    f"{i}- {{name: client-ca, mountPath: {CLIENT_CA_DIR}, readOnly: true}}\n"
                    "{{- end }}"
                )
            )
        )
    spec["volumes"].append(
        mk.line(
            lambda i: (
                "{{- if .Values.mtls.clientCASecret }}\n"
                f"{i}- {{name: client-ca, secret: {{secretName: {{{{ .Values.mtls.clientCASecret }}}}}}}}\n"
                "{{- end }}"
            )
        )
    )


def template_controller_deployment(d: dict, mk: Markers) -> None:
    d["spec"]["replicas"] = mk.value("{{ .Values.controller.replicas }}")
    own_priority(d["spec"]["template"]["spec"], mk, "controller")
    pod_scheduling(d["spec"]["template"]["spec"], mk, "controller")
    deployment_strategy(d, mk, "controller")
    c = container(d["spec"]["template"]["spec"], "controller")
    c["resources"] = mk.value("{{ toJson .Values.controller.resources }}")
    # controller.flags: {name: value} -> --name=value; true/false -> --name / --no-name (the
    # BooleanOptionalAction spelling controller/flags.py uses).
    c["command"].append(
        mk.line(
            lambda i: (
                "{{- range $flag, $value := .Values.controller.flags }}\n"
                '{{- if kindIs "bool" $value }}\n'
                f'{i}- {{{{ ternary (printf "--%s" $flag) (printf "--no-%s" $flag) $value | quote }}}}\n'
                "{{- else }}\n"
                f'{i}- {{{{ printf "--%s=%v" $flag $value | quote }}}}\n'
                "{{- end }}\n"
                "{{- end }}"
            )
        )
    )


def template_job(d: dict, mk: Markers) -> None:
    d["metadata"].setdefault("annotations", {}).update(HOOK_ANNOTATIONS)
    pod_scheduling(d["spec"]["template"]["spec"], mk, None)
    c = container(d["spec"]["template"]["spec"], "cabundle")
    c["resources"] = mk.value("{{ toJson .Values.cabundleJob.resources }}")
    c["command"].append(
        mk.line(
            lambda i: (
                f'{{{{- if ne .Values.webhookConfigurations.name "{CONFIG_NAME}" }}}}\n'
                f"{i}- --config-name={{{{ .Values.webhookConfigurations.name }}}}\n"
                "{{- end }}"
            )
        )
    )


# Helm's and Kubernetes' recommended labels on every object
# (https://helm.sh/docs/chart_best_practices/labels/,
# https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/); _helpers.tpl
# "priogate.labels" gives them. Objects and pod templates only: selectors keep the base's
# name/component pair, as a Deployment's selector is immutable.
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def standard_labels(obj: dict, mk: Markers) -> None:
    labels = obj["metadata"].setdefault("labels", {})
    helper = "priogate.labels" if "app.kubernetes.io/name" not in labels else "priogate.labelsWithoutName"
    labels[mk.line(lambda i: f'{{{{- include "{helper}" . | nindent {len(i)} }}}}')] = 0


def extra_excluded_namespaces(obj: Any, mk: Markers) -> None:
    """webhookConfigurations.excludeNamespaces joins every namespace exemption (hooks' and
    policy bindings' namespaceSelector NotIn kubernetes.io/metadata.name)."""
    if isinstance(obj, dict):
        if obj.get("key") == "kubernetes.io/metadata.name" and obj.get("operator") == "NotIn":
            obj["values"].append(
                mk.line(
                    lambda i: (
                        "{{- range .Values.webhookConfigurations.excludeNamespaces }}\n"
                        f"{i}- {{{{ . | quote }}}}\n"
                        "{{- end }}"
                    )
                )
            )
            return
        for v in obj.values():
            extra_excluded_namespaces(v, mk)
    elif isinstance(obj, list):
        for v in obj:
            extra_excluded_namespaces(v, mk)


def hook_overrides(config: dict, mk: Markers) -> None:
    """webhookConfigurations.hooks.<hook>.failurePolicy / timeoutSeconds, by the hook's name
    without .priogate.io; unset, the mode's (webhook.policy)."""
    for hook in config["webhooks"]:
        short = hook["name"].removesuffix(".priogate.io")
        for field in ("failurePolicy", "timeoutSeconds"):
            default = hook[field]
            hook[field] = mk.value(
                f'{{{{ dig "{short}" "{field}" {json.dumps(default)} .Values.webhookConfigurations.hooks }}}}'
            )


def only_with_preview(config: dict, mk: Markers) -> None:
    """The preemption preview's hook (webhook.policy.PREVIEW_HOOKS) only with preemptionPreview:
    the hook's list item becomes a line marker whose block is the item itself, dumped with its
    own markers applied, inside the condition."""
    from webhook.policy import PREVIEW_HOOKS

    hooks = config.get("webhooks")
    if not isinstance(hooks, list):
        return
    for index, hook in enumerate(hooks):
        if isinstance(hook, dict) and hook.get("name") in PREVIEW_HOOKS:

            def block(i: str, item: dict = hook) -> str:
                body = mk.apply(dump([item])).rstrip("\n").splitlines()
                lines = "\n".join(i + ln for ln in body)
                return "{{- if .Values.preemptionPreview }}\n" + lines + "\n{{- end }}"

            hooks[index] = mk.line(block)


def pod_scheduling(pod_spec: dict, mk: Markers, component: str | None) -> None:
    """imagePullSecrets, nodeSelector and tolerations for every pod; topologySpreadConstraints
    per Deployment (they select the component's own pods)."""
    fields = [("imagePullSecrets", ".Values.imagePullSecrets"), ("nodeSelector", ".Values.nodeSelector")]
    fields.append(("tolerations", ".Values.tolerations"))
    if component:
        fields.append(("topologySpreadConstraints", f".Values.{component}.topologySpreadConstraints"))
    for field, value in fields:
        assert field not in pod_spec, f"the base sets {field}; template it from its value"
        pod_spec[
            mk.line(
                lambda i, f=field, v=value: f"{{{{- with {v} }}}}\n{i}{f}: {{{{ toJson . }}}}\n{{{{- end }}}}"
            )
        ] = 0


def deployment_strategy(d: dict, mk: Markers, component: str) -> None:
    """An upgrade's rollout (`strategy: {type: Recreate}` stops the old pods first)."""
    assert "strategy" not in d["spec"]
    d["spec"][
        mk.line(
            lambda i: (
                f"{{{{- with .Values.{component}.strategy }}}}\n"
                f"{i}strategy: {{{{ toJson . }}}}\n{{{{- end }}}}"
            )
        )
    ] = 0


def template_cleanup_job(d: dict, mk: Markers) -> None:
    pod_scheduling(d["spec"]["template"]["spec"], mk, None)
    c = container(d["spec"]["template"]["spec"], "cleanup")
    c["resources"] = mk.value("{{ toJson .Values.cabundleJob.resources }}")
    # webhookConfigurations.create=false: the admin made the serving Secret; it stays.
    c["command"].append(
        mk.line(lambda i: f"{{{{- if not .Values.webhookConfigurations.create }}}}\n{i}- --secret=\n{{{{- end }}}}")
    )


def template_certs_job(d: dict, mk: Markers) -> None:
    pod_scheduling(d["spec"]["template"]["spec"], mk, None)
    c = container(d["spec"]["template"]["spec"], "cabundle")
    c["resources"] = mk.value("{{ toJson .Values.cabundleJob.resources }}")


def template_networkpolicy(d: dict, mk: Markers) -> None:
    # The first rule: the webhook ports, kube-apiserver's; the second (the health ports) stays open.
    rule = d["spec"]["ingress"][0]
    assert [p["port"] for p in rule["ports"]] == ["priority", "quota"]
    assert "from" not in rule, "manifests/networkpolicy.yaml admits every source; values narrow it"
    rule[
        mk.line(
            lambda i: (
                f"{{{{- with .Values.networkPolicy.from }}}}\n{i}from: {{{{ toJson . }}}}\n{{{{- end }}}}"
            )
        )
    ] = 0


def template_cabundle_role(d: dict, mk: Markers) -> None:
    for rule in d["rules"]:
        if rule.get("resourceNames") == [CONFIG_NAME]:
            rule["resourceNames"] = mk.value("[{{ .Values.webhookConfigurations.name | quote }}]")


# (kind, name) -> how to template it, the file it goes to, and the condition it is rendered under.
SPECIAL: dict[tuple[str, str], tuple[Callable[[dict, Markers], None] | None, str | None]] = {
    ("Deployment", "priogate-webhook"): (template_webhook_deployment, None),
    ("Deployment", "priogate-controller"): (template_controller_deployment, None),
    ("Job", "priogate-cabundle"): (template_job, ".Values.webhookConfigurations.create"),
    ("Job", CERTS): (template_certs_job, ".Values.webhookConfigurations.create"),
    ("ServiceAccount", CERTS): (None, ".Values.webhookConfigurations.create"),
    ("Job", CLEANUP): (template_cleanup_job, None),
    ("Role", CERTS): (None, ".Values.webhookConfigurations.create"),
    ("RoleBinding", CERTS): (None, ".Values.webhookConfigurations.create"),
    ("NetworkPolicy", "priogate-webhook"): (template_networkpolicy, ".Values.networkPolicy.enabled"),
    ("NetworkPolicy", "priogate-controller"): (None, ".Values.networkPolicy.enabled"),
    ("NetworkPolicy", "priogate-cabundle"): (None, ".Values.networkPolicy.enabled"),
    ("ClusterRole", "priogate-cabundle"): (template_cabundle_role, None),
    # With one replica a PodDisruptionBudget of minAvailable 1 would block every node drain.
    ("PodDisruptionBudget", "priogate-webhook"): (None, "gt (int .Values.webhook.replicas) 1"),
    ("PodDisruptionBudget", "priogate-controller"): (None, "gt (int .Values.controller.replicas) 1"),
}
