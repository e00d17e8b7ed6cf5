"""The chart's Helm hooks and admission configuration: the serving Secret exists before anything
waits for it, the webhook configurations and in-process policies follow the mode and the values,
no failing-closed hook holds the release's own pods, and `helm uninstall` removes them."""

from __future__ import annotations

import json

import pytest

from tests.unit.chart_render import (
    NAMESPACE,
    container,
    containers,
    defaults,
    hook_of,
    render,
    without_standard_labels,
)
from webhook.configuration import IN_CLUSTER_SERVICE, policy_objects, webhook_configurations
from webhook.policy import PREVIEW_HOOKS, WebhookPolicy
from webhook.priority_policy import PODGROUP_POLICY_NAME, POLICY_NAME


def test_the_only_annotations_helm_adds_are_the_certs_caBundle_and_cleanup_job_hooks() -> None:
    hooked = {k for k, o in defaults().items() if hook_of(o)[0]}
    kinds = ("ServiceAccount", "Role", "RoleBinding", "Job")
    certs = {(kind, name) for kind in kinds for name in ("priogate-certs", "priogate-cleanup")}
    test = {("Pod", "priogate-test-webhook-ready")}
    assert hooked == {("Job", "priogate-cabundle")} | certs | test
    assert hook_of(defaults()["Pod", "priogate-test-webhook-ready"])[0] == {"test"}
    assert hook_of(defaults()["Job", "priogate-cabundle"])[0] == {"post-install", "post-upgrade"}


def _creates_the_serving_secret(obj: dict) -> bool:
    return any(
        c["command"][:4] == ["python", "-m", "certs", "bootstrap"]
        and "--no-create-secret" not in c["command"]
        for c in containers(obj)
    )


def _waits_for_the_serving_secret(obj: dict) -> bool:
    return any("--no-create-secret" in c["command"] for c in containers(obj))


@pytest.mark.parametrize("plugin", [True, False])
def test_the_serving_secret_exists_before_anything_waits_for_it(plugin: bool) -> None:
    """`helm install --wait` waits for the release's objects to be ready before it runs the
    post-install hooks (https://helm.sh/docs/topics/charts_hooks/#the-hook-lifecycle); the webhook's
    init container waits for the Secret. So the Job that creates it, its ServiceAccount and the
    RBAC binding that account must all be pre-install and pre-upgrade hooks, the RBAC at a lower
    weight than the Job, and nothing that waits for the Secret may be a post-install hook."""
    objs = render(f"priorityPlugin={str(plugin).lower()}")
    waiting = [k for k, o in objs.items() if _waits_for_the_serving_secret(o)]
    assert waiting == [("Deployment", "priogate-webhook")]
    for key in waiting:
        assert hook_of(objs[key])[0] == set(), f"{key} waits for the Secret but is a hook"
    first = [
        (k, hook_of(o))
        for k, o in objs.items()
        if _creates_the_serving_secret(o) and {"pre-install", "pre-upgrade"} <= hook_of(o)[0]
    ]
    creators = {k: sorted(hook_of(o)[0]) for k, o in objs.items() if _creates_the_serving_secret(o)}
    assert first, f"no pre-install hook creates the serving Secret; its creators' hooks: {creators}"
    ((job_key, (_, job_weight)),) = first
    account = objs[job_key]["spec"]["template"]["spec"]["serviceAccountName"]
    needed = [("ServiceAccount", account)]
    for key, o in objs.items():
        if key[0] in ("RoleBinding", "ClusterRoleBinding") and any(
            s["kind"] == "ServiceAccount" and s["name"] == account for s in o["subjects"]
        ):
            needed += [key, (o["roleRef"]["kind"], o["roleRef"]["name"])]
    assert len(needed) == 3, needed
    for key in needed:
        events, weight = hook_of(objs[key])
        assert {"pre-install", "pre-upgrade"} <= events, f"{key} is needed by {job_key} but hooks {events}"
        assert weight < job_weight, f"{key} (weight {weight}) is not created before {job_key}"
    # The Role grants what creating the Secret takes (certs/bootstrap.py).
    role = objs[needed[2]]
    assert any("create" in r["verbs"] and r["resources"] == ["secrets"] for r in role["rules"])


@pytest.mark.parametrize("plugin", [True, False])
def test_preemption_preview_registers_its_hooks_and_serves_them_from_the_quota_container(
    plugin: bool,
) -> None:
    objs = render(f"priorityPlugin={str(plugin).lower()}", "preemptionPreview=true")
    policy = WebhookPolicy.in_cluster(plugin, NAMESPACE, preemption_preview=True)
    for config in webhook_configurations(None, b"", policy=policy, service=IN_CLUSTER_SERVICE):
        assert without_standard_labels(objs[config["kind"], "priogate"], config) == config
    serve = [a for a in container(objs, "priogate-webhook", "quota")["command"] if a.startswith("--serve")]
    assert serve == ["--serve=quota,preview"]
    off = render(f"priorityPlugin={str(plugin).lower()}")
    hooks = {h["name"] for h in off["ValidatingWebhookConfiguration", "priogate"]["webhooks"]}
    assert not PREVIEW_HOOKS & hooks
    serve = [a for a in container(off, "priogate-webhook", "quota")["command"] if a.startswith("--serve")]
    assert serve == ["--serve=quota"]


@pytest.mark.parametrize("plugin", [True, False])
def test_mode_selects_the_policy_of_webhook_policy(plugin: bool) -> None:
    objs = render(f"priorityPlugin={str(plugin).lower()}")
    expected = webhook_configurations(
        None, b"", policy=WebhookPolicy.in_cluster(plugin, NAMESPACE), service=IN_CLUSTER_SERVICE
    )
    for config in expected:
        assert without_standard_labels(objs[config["kind"], "priogate"], config) == config
    hooks = objs["MutatingWebhookConfiguration", "priogate"]["webhooks"]
    pod_priority = [h for h in hooks if h["name"].startswith("pod-priority")]
    if plugin:  # the built-in plugin resolves first: the hook could only agree, so it is left out
        assert pod_priority == []
    else:  # exempt: the release namespace only (WebhookPolicy.in_cluster)
        assert pod_priority[0]["failurePolicy"] == "Fail"
        assert pod_priority[0]["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE]}
        ]
    # The in-process policies and their table come with their hooks, in the release's namespace:
    # the PodGroup one in both modes, the pod one with the pod priority hook.
    expected_policies = policy_objects(WebhookPolicy.in_cluster(plugin, NAMESPACE), NAMESPACE)
    names = {o["metadata"]["name"] for o in expected_policies if o["kind"] == "MutatingAdmissionPolicy"}
    assert names == {PODGROUP_POLICY_NAME} | (set() if plugin else {POLICY_NAME})
    for obj in expected_policies:
        key = (obj["kind"], obj["metadata"]["name"])
        assert without_standard_labels(objs[key], obj) == obj


def _exempts(hook: dict, namespace: str) -> bool:
    return any(
        e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn" and namespace in e["values"]
        for e in hook.get("namespaceSelector", {}).get("matchExpressions", [])
    )


def _sees_pod_creates(hook: dict) -> bool:
    return any(
        "pods" in r["resources"] and "" in r["apiGroups"] and {"CREATE", "*"} & set(r["operations"])
        for r in hook["rules"]
    )


@pytest.mark.parametrize("plugin", [True, False])
@pytest.mark.parametrize("namespace", [NAMESPACE, "gate"])
def test_no_fail_hook_holds_the_releases_own_pods(plugin: bool, namespace: str) -> None:
    """The webhook's pods are served by nothing while none runs: a fresh install, or every replica
    gone. A failurePolicy Fail hook that sees their namespace's pod creates would refuse them
    for want of an endpoint, the deadlock docs/modes.md describes, so every such hook exempts the
    release namespace. Exempt from the priority hooks with the plugin replaced, the pods resolve
    no priority: each carries its class's integer itself."""
    objs = render(f"priorityPlugin={str(plugin).lower()}", namespace=namespace)
    hooks = [h for k, o in objs.items() if k[0].endswith("WebhookConfiguration") for h in o["webhooks"]]
    holding = [
        h["name"]
        for h in hooks
        if h["failurePolicy"] == "Fail" and _sees_pod_creates(h) and not _exempts(h, namespace)
    ]
    assert not holding, f"Fail hooks on pod creates in {namespace}, served from there: {holding}"
    classes = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
    for key, obj in objs.items():
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        if "priorityClassName" in spec and not plugin:
            assert spec.get("priority") == classes[spec["priorityClassName"]], key
            assert spec.get("preemptionPolicy") == "PreemptLowerPriority", key
        elif "priorityClassName" in spec:  # the plugin sets them; a preset value is checked by it
            assert "priority" not in spec, key


def test_release_namespace_replaces_priogate_system_everywhere() -> None:
    objs = render(namespace="gate")
    text = json.dumps(list(objs.values()))
    assert NAMESPACE not in text
    assert objs["ClusterRoleBinding", "priogate-webhook"]["subjects"][0]["namespace"] == "gate"
    hooks = objs["ValidatingWebhookConfiguration", "priogate"]["webhooks"]
    assert {h["clientConfig"]["service"]["namespace"] for h in hooks} == {"gate"}


@pytest.mark.parametrize("namespace", [NAMESPACE, "gate"])
def test_the_webhook_knows_the_controllers_identity_in_the_release_namespace(namespace: str) -> None:
    """The quota server refuses priogate.io/ annotation writes from anyone but
    --controller-username, whose built-in default is priogate-system's controller: in any other
    namespace the controller's preemption PATCH would be refused."""
    objs = render(namespace=namespace)
    controller_sa = objs["Deployment", "priogate-controller"]["spec"]["template"]["spec"][
        "serviceAccountName"
    ]
    identity = f"system:serviceaccount:{namespace}:{controller_sa}"
    quota = container(objs, "priogate-webhook", "quota")["command"]
    given = [a.split("=", 1)[1] for a in quota if a.startswith("--controller-username=")]
    assert given == [identity], f"the quota server is not told the controller is {identity}: {quota}"


@pytest.mark.parametrize("plugin", [True, False])
def test_hook_overrides_and_extra_excluded_namespaces(plugin: bool) -> None:
    objs = render(
        f"priorityPlugin={str(plugin).lower()}",
        'webhookConfigurations.hooks={"podgroup-quota":{"failurePolicy":"Ignore","timeoutSeconds":12}}',
        'webhookConfigurations.excludeNamespaces=["batch-system","ci"]',
    )
    hooks = {
        h["name"]: h for k, o in objs.items() if k[0].endswith("WebhookConfiguration") for h in o["webhooks"]
    }
    assert (
        hooks["podgroup-quota.priogate.io"]["failurePolicy"],
        hooks["podgroup-quota.priogate.io"]["timeoutSeconds"],
    ) == (
        "Ignore",
        12,
    )
    defaults_by_name = {
        h["name"]: h
        for k, o in render(f"priorityPlugin={str(plugin).lower()}").items()
        if k[0].endswith("WebhookConfiguration")
        for h in o["webhooks"]
    }
    for name, hook in hooks.items():
        if name != "podgroup-quota.priogate.io":
            assert hook["failurePolicy"] == defaults_by_name[name]["failurePolicy"]
            assert hook["timeoutSeconds"] == defaults_by_name[name]["timeoutSeconds"]
        if "namespaceSelector" in defaults_by_name[name]:
            assert _exempts(hook, "batch-system") and _exempts(hook, "ci"), name
            assert _exempts(hook, NAMESPACE), name


def test_webhook_configurations_renamed_or_left_out() -> None:
    objs = render("webhookConfigurations.name=priogate-b")
    assert {k for k in objs if k[0].endswith("WebhookConfiguration")} == {
        ("MutatingWebhookConfiguration", "priogate-b"),
        ("ValidatingWebhookConfiguration", "priogate-b"),
    }
    (rule,) = objs["ClusterRole", "priogate-cabundle"]["rules"]
    assert rule["resourceNames"] == ["priogate-b"]
    assert "--config-name=priogate-b" in containers(objs["Job", "priogate-cabundle"])[0]["command"]
    objs = render("webhookConfigurations.create=false")
    # Only the uninstall cleanup Job stays (it keeps the admin's Secret then).
    assert {k for k in objs if k[0].endswith("WebhookConfiguration") or k[0] == "Job"} == {
        ("Job", "priogate-cleanup")
    }


@pytest.mark.parametrize("mtls", [False, True])
def test_helm_test_pod_checks_both_webhook_ports_through_the_service(mtls: bool) -> None:
    objs = render(*(["mtls.clientCASecret=apiserver-client-ca"] if mtls else []), namespace="gate")
    pod = objs["Pod", "priogate-test-webhook-ready"]
    assert hook_of(pod)[0] == {"test"}
    service = objs["Service", "priogate-webhook"]
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["SERVICE"] == f"{service['metadata']['name']}.gate.svc"
    assert env["MTLS"] == ("1" if mtls else "")
    script = c["command"][2]
    assert {p["port"] for p in service["spec"]["ports"]} == {443, 8444, 8081, 8082}
    assert "for port in (443, 8444):" in script and "/readyz" in script
    # the health ports too, which need no client certificate with or without mTLS
    assert "for port in (8081, 8082):" in script and 'f"http://{host}:{port}/readyz"' in script
    compile(script, "webhook-ready", "exec")
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "priogate-webhook-tls"


def test_uninstall_removes_the_webhook_configurations() -> None:
    """`helm uninstall` deletes the release's objects but never its hooks' (or anything annotated
    helm.sh/resource-policy: keep; https://helm.sh/docs/topics/charts_hooks/#hook-resources-are-not-managed-with-corresponding-releases):
    the configurations and the in-process policies must be ordinary release objects, or they
    would outlive the webhook they call and, failing closed, refuse every PodGroup write."""
    for plugin in (True, False):
        objs = render(f"priorityPlugin={str(plugin).lower()}")
        admission = [
            k for k in objs if k[0].endswith(("WebhookConfiguration", "AdmissionPolicy", "PolicyBinding"))
        ]
        assert len(admission) >= 4
        for key in admission:
            annotations = objs[key]["metadata"].get("annotations", {})
            assert not hook_of(objs[key])[0], f"{key} is a hook: helm uninstall would leave it"
            assert annotations.get("helm.sh/resource-policy") != "keep", key
