"""manifests/ stays in step with the code, and kustomize can build it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from priogate.priority_table import TABLE_NAME
from webhook.class_access_policy import POLICY_NAME as CLASS_ACCESS_POLICY_NAME
from webhook.configuration import in_cluster_manifest
from webhook.policy import WebhookPolicy
from webhook.priority_policy import PODGROUP_POLICY_NAME
from webhook.registry import load_rule_sets

ROOT = Path(__file__).resolve().parents[2]


def test_webhook_configurations_match_the_registry():
    on_disk = (ROOT / "manifests" / "webhook-configurations.yaml").read_text()
    assert on_disk == in_cluster_manifest(), "run `make manifests` and commit the result"
    docs = list(yaml.safe_load_all(on_disk))
    paths = {h["clientConfig"]["service"]["path"] for doc in docs for h in doc.get("webhooks", [])}
    # The shipped mode keeps the built-in Priority plugin: the hooks that could only agree with
    # it are not registered (webhook.policy).
    policy = WebhookPolicy.for_mode(priority_plugin=True)
    assert paths == {r.path for r in load_rule_sets() if policy.registers(r)}
    # With the PodGroup defaults hook comes the in-process policy that spares it the common group
    # (its matchConditions count on it), and the table that policy reads.
    assert [(d["kind"], d["metadata"]["name"]) for d in docs if "webhooks" not in d] == [
        ("ConfigMap", TABLE_NAME),
        ("MutatingAdmissionPolicy", PODGROUP_POLICY_NAME),
        ("MutatingAdmissionPolicyBinding", PODGROUP_POLICY_NAME),
        # In both modes: who may use a class (webhook/class_access_policy.py).
        ("ValidatingAdmissionPolicy", CLASS_ACCESS_POLICY_NAME),
        ("ValidatingAdmissionPolicyBinding", CLASS_ACCESS_POLICY_NAME),
    ]


def kustomize_build() -> dict[tuple[str, str], dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to check that `kubectl apply -k manifests/` would work")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests")], capture_output=True, text=True, check=True
    )
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


def test_kustomize_builds():
    kinds = {kind for kind, _ in kustomize_build()}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ClusterRole",
        "PodDisruptionBudget",
    } <= kinds


def test_each_hook_reaches_the_server_that_answers_it():
    docs = kustomize_build()
    service = docs[("Service", "priogate-webhook")]
    target_of = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    pod = docs[("Deployment", "priogate-webhook")]["spec"]["template"]["spec"]
    serving = {}  # container port name -> the --serve value of the container that opens it
    for container in pod["containers"]:
        serve = next(a.split("=", 1)[1] for a in container["command"] if a.startswith("--serve="))
        for port in container["ports"]:
            serving[port["name"]] = serve
    server_of = {r.path: r.server for r in load_rule_sets()}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in docs[(kind, "priogate")]["webhooks"]:
            ref = hook["clientConfig"]["service"]
            assert serving[target_of[ref["port"]]] == server_of[ref["path"]], hook["name"]


def test_controller_deployment_and_rbac():
    docs = kustomize_build()
    deployment = docs[("Deployment", "priogate-controller")]
    assert deployment["spec"]["replicas"] == 2
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["python", "-m", "controller", "run"]
    granted = {
        (group, resource, verb)
        for rule in docs[("ClusterRole", "priogate-controller")]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for need in [
        ("", "pods", "watch"),
        ("", "pods", "delete"),
        ("", "pods/status", "patch"),
        ("scheduling.volcano.sh", "podgroups/status", "update"),
        ("scheduling.volcano.sh", "podgroups", "patch"),
        ("events.k8s.io", "events", "create"),
        ("policy", "poddisruptionbudgets", "list"),
    ]:
        assert need in granted, need
    ledgers = docs[("Role", "priogate-controller-ledgers")]
    assert ledgers["metadata"]["namespace"] == "priogate-system"
    assert "update" in ledgers["rules"][0]["verbs"] and ledgers["rules"][0]["resources"] == ["configmaps"]
    lease_rules = docs[("Role", "priogate-controller-leader-election")]["rules"]
    assert lease_rules[0]["resources"] == ["leases"] and "update" in lease_rules[0]["verbs"]


WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def test_no_configmap_or_secret_write_outside_priogates_namespace():
    """The ledgers and the serving Secret live in priogate-system, and priogate may
    write ConfigMaps and Secrets nowhere else: not through a ClusterRole (bound cluster-wide, or
    by a RoleBinding elsewhere), not through a Role in another namespace."""
    docs = kustomize_build()
    roles = {(kind, name): doc for (kind, name), doc in docs.items() if kind in ("ClusterRole", "Role")}
    assert roles, "no RBAC in manifests/"

    def writes_secrets_or_configmaps(role: dict) -> bool:
        return any(
            set(rule.get("verbs", [])) & WRITE_VERBS
            and set(rule.get("resources", [])) & {"configmaps", "secrets", "*"}
            and set(rule.get("apiGroups", [])) & {"", "*"}
            for rule in role.get("rules", [])
        )

    for (kind, name), role in roles.items():
        if not writes_secrets_or_configmaps(role):
            continue
        assert kind == "Role", f"ClusterRole {name} grants ConfigMap or Secret writes"
        assert role["metadata"]["namespace"] == "priogate-system", name
    for (kind, name), binding in docs.items():
        if kind in ("RoleBinding", "ClusterRoleBinding") and binding["roleRef"]["kind"] == "ClusterRole":
            assert not writes_secrets_or_configmaps(docs[("ClusterRole", binding["roleRef"]["name"])]), name
    granted = {
        (doc["metadata"]["name"], verb)
        for (kind, _), doc in roles.items()
        if kind == "Role"
        for rule in doc["rules"]
        if "configmaps" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {("priogate-webhook-ledgers", "update"), ("priogate-controller-ledgers", "update")} <= granted


def rules_of(docs: dict[tuple[str, str], dict], namespace: str, account: str) -> list[tuple[str, dict]]:
    """Every RBAC rule bound to ServiceAccount namespace/account: (the binding's namespace, or ""
    for cluster-wide, rule)."""
    out = []
    for (kind, _), binding in docs.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace
            for s in binding["subjects"]
        ):
            continue
        role = docs[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        where = binding["metadata"].get("namespace", "") if kind == "RoleBinding" else ""
        out.extend((where, rule) for rule in role["rules"])
    return out


def service_account_of(docs: dict[tuple[str, str], dict], kind: str, name: str) -> str:
    return docs[(kind, name)]["spec"]["template"]["spec"]["serviceAccountName"]


WEBHOOK_CONFIGS = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}


def test_only_the_cabundle_job_may_change_webhook_configurations_and_only_priogates():
    docs = kustomize_build()
    accounts = {name for kind, name in docs if kind == "ServiceAccount"}
    may_change = set()
    for account in accounts:
        for _, rule in rules_of(docs, "priogate-system", account):
            if "admissionregistration.k8s.io" in rule["apiGroups"] and WEBHOOK_CONFIGS & set(
                rule["resources"]
            ):
                assert set(rule["verbs"]) <= {"get", "update"}, (account, rule)
                assert rule.get("resourceNames") == ["priogate"], (account, rule)
                may_change.add(account)
    assert may_change == {"priogate-cabundle"}
    assert service_account_of(docs, "Job", "priogate-cabundle") == "priogate-cabundle"
    # The serving pod (servers and init container share its ServiceAccount) holds none of it.
    assert service_account_of(docs, "Deployment", "priogate-webhook") == "priogate-webhook"
    assert service_account_of(docs, "Deployment", "priogate-controller") == "priogate-controller"


def test_secret_rights_are_namespaced_and_by_name_except_the_one_create():
    docs = kustomize_build()
    for kind, name in docs:
        if kind == "ClusterRole":
            for rule in docs[(kind, name)]["rules"]:
                assert "secrets" not in rule["resources"], f"ClusterRole {name} grants Secrets"
    creators = set()
    for account in (name for kind, name in docs if kind == "ServiceAccount"):
        for where, rule in rules_of(docs, "priogate-system", account):
            if "secrets" not in rule["resources"]:
                continue
            assert where == "priogate-system", (account, rule)
            if rule.get("resourceNames") is None:
                # RBAC cannot limit `create` by name; nothing else may go unnamed.
                assert rule["verbs"] == ["create"], (account, rule)
                creators.add(account)
            else:
                assert rule["resourceNames"] == ["priogate-webhook-tls"], (account, rule)
    assert creators == {"priogate-cabundle"}
    webhook = [
        r for _, r in rules_of(docs, "priogate-system", "priogate-webhook") if "secrets" in r["resources"]
    ]
    assert webhook and all(set(r["verbs"]) <= {"get", "update"} for r in webhook)


def test_the_init_container_neither_creates_the_secret_nor_injects_the_ca():
    pod = kustomize_build()[("Deployment", "priogate-webhook")]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:4] == ["python", "-m", "certs", "bootstrap"]
    assert {"--no-create-secret", "--no-inject-ca-bundle"} <= set(init["command"])


def test_the_network_policy_selects_the_webhook_pods_and_their_ports():
    docs = kustomize_build()
    policy = docs[("NetworkPolicy", "priogate-webhook")]["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    selector = policy["podSelector"]["matchLabels"]
    webhook = docs[("Deployment", "priogate-webhook")]["spec"]["template"]
    controller = docs[("Deployment", "priogate-controller")]["spec"]["template"]
    assert selector.items() <= webhook["metadata"]["labels"].items()
    assert not selector.items() <= controller["metadata"]["labels"].items()
    rule, health, replicas = policy["ingress"]
    ports = {p["name"] for c in webhook["spec"]["containers"] for p in c["ports"]}
    assert {p["port"] for p in rule["ports"]} | {p["port"] for p in health["ports"]} == ports
    assert {p["port"] for p in rule["ports"]} == {"priority", "quota"}
    assert {p["port"] for p in health["ports"]} == {"priority-health", "quota-health"}
    # Ledger relays: the quota port from the other webhook pods, whatever the first rule admits.
    assert {p["port"] for p in replicas["ports"]} == {"quota"}
    assert [f["podSelector"]["matchLabels"] for f in replicas["from"]] == [selector]


def test_the_webhook_may_list_every_kind_a_safe_delete_reads_and_do_nothing_more_with_them():
    """A PriorityClass DELETE lists every kind of priogate.class_users.KINDS cluster-wide, and a
    new globalDefault lists namespaces (docs/priorityclass-deletes.md): the
    webhook's ServiceAccount may, and may not write the workload kinds."""
    from priogate.class_users import KINDS

    rules = [
        rule
        for where, rule in rules_of(kustomize_build(), "priogate-system", "priogate-webhook")
        if not where
    ]

    def verbs(group: str, resource: str) -> set[str]:
        return {
            verb
            for rule in rules
            if group in rule["apiGroups"] and resource in rule["resources"] and not rule.get("resourceNames")
            for verb in rule["verbs"]
        }

    for kind in KINDS:
        group = kind.group_version.rpartition("/")[0]
        assert "list" in verbs(group, kind.plural), kind
    assert "list" in verbs("", "namespaces")
    for group, resource in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("scheduling.k8s.io", "podgroups"),
    ]:
        assert verbs(group, resource) == {"list"}, (group, resource)


def test_the_quota_container_names_its_own_address_and_port_as_its_peer_address():
    """Ledger relays reach a replica at its peer address (webhook/ledger_relay.py): the pod's IP
    and the port its quota server binds, which is the container port the NetworkPolicy opens."""
    webhook = kustomize_build()[("Deployment", "priogate-webhook")]["spec"]["template"]["spec"]
    (quota,) = [c for c in webhook["containers"] if c["name"] == "quota"]
    env = {e["name"]: e for e in quota["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    (port,) = [p["containerPort"] for p in quota["ports"] if p["name"] == "quota"]
    assert env["PRIOGATE_PEER_ADDRESS"]["value"] == f"$(POD_IP):{port}"
    assert f"--bind=0.0.0.0:{port}" in quota["command"]
    # Kubernetes expands $(POD_IP) only when POD_IP is defined earlier in the list.
    names = [e["name"] for e in quota["env"]]
    assert names.index("POD_IP") < names.index("PRIOGATE_PEER_ADDRESS")
