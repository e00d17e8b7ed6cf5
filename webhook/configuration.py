"""Mutating and Validating webhook configurations, derived from the registered rule sets and the
mode policy (webhook.policy).

Used by the local control plane (url + caBundle) and to check that manifests/ stays in step
with the code (service reference).
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from priogate.priority_table import table_object
from webhook.class_access_policy import class_access_policies
from webhook.policy import SYSTEM_NAMESPACES, HookPolicy, WebhookPolicy
from webhook.priority_policy import podgroup_policies, priority_policies
from webhook.registry import RuleSet, load_rule_sets
from webhook.rules import pod_priority, podgroup_defaults

# The Service port of each server (webhook.registry.SERVERS): one Service, one port per server
# container, so each rule set reaches the server that answers it.
# The preview server, where turned on, runs in the quota server's container (`--serve=quota,preview`):
# its watch caches and threads are added there, not a container of its own.
SERVICE_PORTS = {"priority": 443, "quota": 8444, "preview": 8444}


def _client_config(
    rule_set: RuleSet, ca_bundle_pem: bytes, base_url: str | None, service: Mapping | None
) -> dict:
    # Without a CA the key is left out, so re-applying the manifests never wipes the caBundle
    # that the certificate bootstrap injected.
    config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle_pem).decode()} if ca_bundle_pem else {}
    if base_url is not None:
        config["url"] = base_url.rstrip("/") + rule_set.path
    elif service is not None:
        config["service"] = {**service, "port": SERVICE_PORTS[rule_set.server], "path": rule_set.path}
    else:
        raise ValueError("give either base_url or service")
    return config


def _webhook(rule_set: RuleSet, client_config: dict, policy: HookPolicy) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": rule_set.name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": list(rule_set.api_groups),
                "apiVersions": list(rule_set.api_versions),
                "resources": list(rule_set.resources),
                "operations": list(rule_set.operations),
                "scope": "*",
            },
            *(
                {
                    "apiGroups": list(rule_set.api_groups),
                    "apiVersions": list(rule_set.api_versions),
                    "resources": [resource],
                    "operations": list(operations),
                    "scope": "*",
                }
                for resource, operations in rule_set.subresource_rules
            ),
        ],
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": rule_set.side_effects,
        "timeoutSeconds": rule_set.timeout_seconds,
        "failurePolicy": policy.failure_policy,
        "matchPolicy": "Equivalent",
    }
    expressions: list[dict[str, Any]] = []
    if policy.exempt_namespaces:
        exempt = list(policy.exempt_namespaces)
        expressions.append({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": exempt})
    expressions += [
        {"key": key, "operator": operator, "values": list(values)}
        for key, operator, values in rule_set.namespace_labels
    ]
    if expressions:
        # Cluster-scoped objects (PriorityClasses) are never filtered by a namespace selector.
        hook["namespaceSelector"] = {"matchExpressions": expressions}
    if rule_set.match_conditions:
        hook["matchConditions"] = [{"name": n, "expression": e} for n, e in rule_set.match_conditions]
    if rule_set.kind == "mutating":
        hook["reinvocationPolicy"] = "Never"
    return hook


def webhook_configurations(
    base_url: str | None,
    ca_bundle_pem: bytes,
    *,
    policy: WebhookPolicy,
    service: Mapping[str, Any] | None = None,
    name: str = "priogate",
    rule_sets: Sequence[RuleSet] | None = None,
) -> list[dict[str, Any]]:
    """[MutatingWebhookConfiguration, ValidatingWebhookConfiguration] for every rule set the
    policy registers, each hook under the policy for its rule set."""
    rule_sets = list(rule_sets if rule_sets is not None else load_rule_sets())
    configs = []
    for kind, config_kind in (
        ("mutating", "MutatingWebhookConfiguration"),
        ("validating", "ValidatingWebhookConfiguration"),
    ):
        hooks = [
            _webhook(rs, _client_config(rs, ca_bundle_pem, base_url, service), policy.for_rule_set(rs))
            for rs in rule_sets
            if rs.kind == kind and policy.registers(rs)
        ]
        configs.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": config_kind,
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "priogate"}},
                "webhooks": hooks,
            }
        )
    return configs


def policy_objects(
    policy: WebhookPolicy, table_namespace: str, resources: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """What registers with the webhook configurations in this mode besides them
    (webhook/priority_policy.py): the in-process policy that spares the PodGroup defaults hook the
    common group; with the pod priority hook registered (the plugin replaced), the one that
    spares it the common pod; and, before them, the placeholder table they read until the
    controller writes the real one. Apply the table only where it is absent: it is the
    controller's to fill. In both modes, the validating policy that keeps a class to the
    namespaces its `priogate.io/allowed-namespaces` selector matches (webhook/class_access_policy.py).
    `resources` keeps only the policies for those resources, as the hooks are kept."""
    wanted = set(resources) if resources is not None else {"pods", "podgroups"}
    out: list[dict[str, Any]] = []
    if "podgroups" in wanted and policy.registers(podgroup_defaults.RULE_SET):
        out += podgroup_policies(
            table_namespace, policy.for_rule_set(podgroup_defaults.RULE_SET).exempt_namespaces
        )
    if "pods" in wanted and policy.registers(pod_priority.RULE_SET):
        out += priority_policies(table_namespace)
    if wanted & {"pods", "podgroups"}:
        out += class_access_policies(table_namespace, SYSTEM_NAMESPACES)
    # The table first: the PodGroup policy's binding refuses creates while it is missing.
    return [table_object(table_namespace), *out] if out else []


IN_CLUSTER_SERVICE = {"namespace": "priogate-system", "name": "priogate-webhook"}


def in_cluster_manifest() -> str:
    """manifests/webhook-configurations.yaml: the Service-backed configurations. The caBundle is
    filled in by the certificate bootstrap (python -m certs bootstrap), which the priogate-cabundle
    Job runs with its own ServiceAccount at install."""
    import yaml

    # Shipped for clusters that keep the built-in Priority plugin (managed ones cannot turn it
    # off): the priority hooks fail open to it, the quota hooks have no fallback and fail closed.
    policy = WebhookPolicy.for_mode(priority_plugin=True)
    configs = webhook_configurations(None, b"", policy=policy, service=IN_CLUSTER_SERVICE)
    configs += policy_objects(policy, IN_CLUSTER_SERVICE["namespace"])
    header = "# Generated from the registered rule sets by `make manifests`; do not edit by hand.\n"
    return header + yaml.safe_dump_all(configs, sort_keys=False)


if __name__ == "__main__":
    print(in_cluster_manifest(), end="")
