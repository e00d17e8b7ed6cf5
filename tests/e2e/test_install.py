"""The Helm chart and the kustomize base against the test run's real control plane.

* `helm install` of charts/priogate into priogate-system, for real, with
  `webhookConfigurations.create=false`: the test run's own webhook (outside the cluster, registered
  as the `priogate` configurations) keeps answering every admission. Registering the chart's hooks
  would point them at pods that kwok only pretends to run, and the quota hooks fail closed, so
  every PodGroup write in the test run would be refused. The configurations and the caBundle Job
  (which only exists alongside them) are instead sent with `--dry-run=server`, in both modes:
  validated and admitted by the API server, never stored.
* `kubectl apply -k manifests/ --server-side --dry-run=server`: every object of the base accepted.
* RBAC both ways, with `kubectl auth can-i --as=system:serviceaccount:priogate-system:<sa>`: yes
  for every call the code makes, no for what it must not do.
* The Deployments' pods are scheduled onto the kwok nodes and Running (kwok fakes the containers,
  so no image is pulled).

The release is uninstalled at the end: its pods take capacity on the fake nodes that other tests
count on. Two objects exist before the install: the PodGroup CRD (the chart ships it in crds/,
which Helm skips when present) and the user ClusterRoles from manifests/user-rbac.yaml, which
Helm adopts once they carry its ownership metadata
(https://helm.sh/docs/helm/helm_install/, "--take-ownership"; the labels and annotations below
are what that flag sets); the uninstall removes them (Helm reads the resource policy from the
release's manifest), so the fixture applies them again afterwards.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from localcluster import LocalCluster
from localcluster.binaries import REPO, ensure_helm
from tests.e2e.helpers import Kubectl, wait_for
from webhook.class_access_policy import POLICY_NAME as CLASS_ACCESS_POLICY_NAME
from webhook.priority_policy import PODGROUP_POLICY_NAME, POLICY_NAME

NAMESPACE = "priogate-system"
RELEASE = "priogate"
CHART = REPO / "charts" / "priogate"
USER_ROLES = ("priogate-podgroups-edit", "priogate-podgroups-view")
TENANT_NS = "default"  # any namespace but priogate's own


def sa(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{name}"


class Helm:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = binary, kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def template(self, *args: str) -> str:
        return self("template", RELEASE, str(CHART), "-n", NAMESPACE, *args).stdout


@pytest.fixture(scope="module")
def helm(cluster: LocalCluster) -> Helm:
    return Helm(ensure_helm(), cluster.kubeconfig)


@pytest.fixture(scope="module")
def release(helm: Helm, kubectl: Kubectl) -> Iterator[str]:
    kubectl("create", "namespace", NAMESPACE, check=False)  # the test run's controller made it, usually
    for role in USER_ROLES:
        kubectl("label", "--overwrite", f"clusterrole/{role}", "app.kubernetes.io/managed-by=Helm")
        kubectl(
            "annotate",
            "--overwrite",
            f"clusterrole/{role}",
            f"meta.helm.sh/release-name={RELEASE}",
            f"meta.helm.sh/release-namespace={NAMESPACE}",
        )
    install = helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--set",
        "webhookConfigurations.create=false",
        "--wait",
        "--timeout",
        "180s",
    )
    try:
        yield install.stdout
    finally:
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s", check=False)
        # Helm reads the resource policy from the release's manifest, not from the live objects,
        # so the adopted user roles went with the release: put back what the session installed,
        # or every later test acting as a namespace user loses its PodGroup rights.
        kubectl("apply", "-f", str(REPO / "manifests" / "user-rbac.yaml"))


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_helm_install_creates_every_object_of_the_release(release: str, helm: Helm, kubectl: Kubectl) -> None:
    assert "STATUS: deployed" in release
    # NOTES.txt: where it went, how to check it, how the kubectl plugin finds the ledgers.
    notes = release.split("NOTES:", 1)[1]
    assert f"installed in namespace {NAMESPACE} (release {RELEASE})" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE}" in notes
    assert f"--priogate-namespace {NAMESPACE}" in notes
    assert "webhookConfigurations.create=false" in notes
    manifest = docs(helm("get", "manifest", RELEASE, "-n", NAMESPACE).stdout)
    kinds = {d["kind"] for d in manifest}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "NetworkPolicy", "PodDisruptionBudget"} <= kinds
    assert not {k for k in kinds if k.endswith("WebhookConfiguration") or k == "Job"}
    for d in manifest:
        ns = ["-n", d["metadata"].get("namespace", NAMESPACE)] if "namespace" in d["metadata"] else []
        kubectl("get", *ns, f"{d['kind'].lower()}/{d['metadata']['name']}")
        # Helm's recommended labels, on the live objects
        labels = kubectl.json("get", *ns, f"{d['kind'].lower()}/{d['metadata']['name']}")["metadata"][
            "labels"
        ]
        assert (
            labels["app.kubernetes.io/instance"] == RELEASE
            and labels["app.kubernetes.io/managed-by"] == "Helm"
        )
    # The webhook trusts the identity the controller's pods run as, in the release namespace.
    deployments = {
        d["metadata"]["name"]: d for d in kubectl.json("get", "deployments", "-n", NAMESPACE)["items"]
    }
    controller_sa = deployments["priogate-controller"]["spec"]["template"]["spec"]["serviceAccountName"]
    (quota,) = [
        c
        for c in deployments["priogate-webhook"]["spec"]["template"]["spec"]["containers"]
        if c["name"] == "quota"
    ]
    assert f"--controller-username={sa(controller_sa)}" in quota["command"]


# The test run's own `priogate` configurations are registered by URL; a dry-run apply of the
# service-backed ones under that name would be merged into them (url and service both set) and
# refused for that, which says nothing about ours. So both dry runs use another name: a create.
DRY_RUN_NAME = "priogate-dry-run"


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin-kept", "plugin-replaced"])
def test_webhook_configurations_and_cabundle_job_pass_a_server_dry_run(
    release: str, helm: Helm, kubectl: Kubectl, plugin: bool
) -> None:
    text = helm.template(
        "--set", f"priorityPlugin={str(plugin).lower()}",
        "--set", f"webhookConfigurations.name={DRY_RUN_NAME}",
        "--show-only", "templates/generated/webhookconfigurations.yaml",
        "--show-only", "templates/generated/job-priogate-cabundle.yaml",
        # the pre-install hooks that create the serving Secret
        *[
            arg
            for kind in ("serviceaccount", "role", "rolebinding", "job")
            for arg in ("--show-only", f"templates/generated/{kind}-priogate-certs.yaml")
        ],
    )  # fmt: skip
    # The in-process policies, their bindings and the table's placeholder
    # (webhook/priority_policy.py) come too: the PodGroup one in both modes, the pod one with the
    # plugin replaced, the class access one (webhook/class_access_policy.py) in both modes;
    # renamed like the configurations, as the test run's cluster registers its own.
    for name in (POLICY_NAME, PODGROUP_POLICY_NAME, CLASS_ACCESS_POLICY_NAME):
        text = text.replace(f"name: {name}\n", f"name: {DRY_RUN_NAME}-{name}\n")
        text = text.replace(f"policyName: {name}\n", f"policyName: {DRY_RUN_NAME}-{name}\n")
    objects = docs(text)
    policies = 1 if plugin else 2
    policy_kinds = [
        "ConfigMap",
        *["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"] * policies,
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    certs_hooks = ["ServiceAccount", "Role", "RoleBinding", "Job"]
    assert sorted(d["kind"] for d in objects) == sorted(
        ["Job", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", *policy_kinds, *certs_hooks]
    )
    out = kubectl("apply", "--server-side", "--dry-run=server", "-n", NAMESPACE, "-f", "-", stdin=text).stdout
    assert out.count("(server dry run)") == len(objects), out


def test_kustomize_base_passes_a_server_side_dry_run(release: str, kubectl: Kubectl) -> None:
    base = docs(
        subprocess.run(
            ["kubectl", "kustomize", str(REPO / "manifests")], capture_output=True, text=True, check=True
        ).stdout
    )
    for d in base:
        if d["kind"].endswith("WebhookConfiguration"):
            d["metadata"]["name"] = DRY_RUN_NAME
    # --force-conflicts: the objects the release created are owned by Helm's field manager; the
    # values are the same (tests/unit/test_chart.py), and a dry run stores nothing.
    out = kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
        stdin=yaml.safe_dump_all(base, sort_keys=False),
    ).stdout  # fmt: skip
    assert out.count("(server dry run)") == len(base), out


def test_deployments_pods_are_scheduled_and_running_on_kwok_nodes(release: str, kubectl: Kubectl) -> None:
    nodes = {n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"]}
    for component, replicas in (("webhook", 2), ("controller", 2)):
        selector = f"app.kubernetes.io/name=priogate,app.kubernetes.io/component={component}"

        def running(sel: str = selector, n: int = replicas) -> bool:
            pods = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", sel)["items"]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return len(live) == n and all(p["status"].get("phase") == "Running" for p in live)

        wait_for(running, timeout=60, what=f"{replicas} {component} pods Running")
        for pod in kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]:
            assert pod["spec"]["nodeName"] in nodes
            # the test run's priority hook (or the built-in plugin) resolved the class
            assert pod["spec"]["priority"] == 2000000000


# --- RBAC: what each ServiceAccount may and may not do ------------------------------------------
# (account, verb, resource[/name], namespace or None for --all-namespaces / cluster scope, [subresource])

WEBHOOK, CONTROLLER, CABUNDLE = "priogate-webhook", "priogate-controller", "priogate-cabundle"
CACHE_VERBS = ("get", "list", "watch")

ALLOWED: list[tuple[str, str, str, str | None, str]] = [
    # webhook/view.py: the caches of priogate/kube/catalogue.py the rules read, all namespaces
    *[
        (WEBHOOK, v, r, None, "")
        for v in CACHE_VERBS
        for r in (
            "priorityclasses.scheduling.k8s.io",
            "resourcequotas",
            "podgroups.scheduling.volcano.sh",
            "pods",
        )
    ],
    # a namespace's first reservation: the enrolment label, then the dry-run probe PodGroup
    # (webhook/rules/podgroup_enrolment.py, priogate/kube/namespaces.py)
    (WEBHOOK, "patch", "namespaces", None, ""),
    # a namespace's default PriorityClass: the namespaces cache (webhook/view.py), no GET
    *[(WEBHOOK, v, "namespaces", None, "") for v in ("list", "watch")],
    (WEBHOOK, "create", "podgroups.scheduling.volcano.sh", TENANT_NS, ""),
    # the ledgers: watched, read and written (GET, POST, PUT) in priogate's own
    # namespace only (priogate/kube/ledger_store.py)
    *[(WEBHOOK, v, "configmaps", NAMESPACE, "") for v in (*CACHE_VERBS, "create", "update")],
    # the servers renew the serving certificate in its Secret (--tls-secret)
    *[(WEBHOOK, v, "secrets/priogate-webhook-tls", NAMESPACE, "") for v in ("get", "update")],
    # controller/caches.py
    *[
        (CONTROLLER, v, r, None, "")
        for v in CACHE_VERBS
        for r in (
            "podgroups.scheduling.volcano.sh",
            "pods",
            "resourcequotas",
            "nodes",
            "poddisruptionbudgets.policy",
            "priorityclasses.scheduling.k8s.io",
        )
    ],
    # controller/enrol.py: the namespaces cache, and the enrolment label put back
    *[(CONTROLLER, v, "namespaces", None, "") for v in (*CACHE_VERBS, "patch")],
    # controller/gang_preemptor.py: victims deleted, DisruptionTarget / nominatedNodeName patched,
    # the preemption record patched onto the PodGroup
    (CONTROLLER, "delete", "pods", TENANT_NS, ""),
    (CONTROLLER, "patch", "pods", TENANT_NS, "status"),
    (CONTROLLER, "patch", "podgroups.scheduling.volcano.sh", TENANT_NS, ""),
    # controller/reconcile.py: the phase (PUT status)
    (CONTROLLER, "get", "podgroups.scheduling.volcano.sh", TENANT_NS, "status"),
    (CONTROLLER, "update", "podgroups.scheduling.volcano.sh", TENANT_NS, "status"),
    # controller/reclaim.py through the ledger store: the ledgers in priogate's namespace
    *[(CONTROLLER, v, "configmaps", NAMESPACE, "") for v in (*CACHE_VERBS, "create", "update")],
    # controller/events.py
    (CONTROLLER, "create", "events.events.k8s.io", TENANT_NS, ""),
    # controller/election.py: its Lease
    *[(CONTROLLER, v, "leases.coordination.k8s.io", NAMESPACE, "") for v in ("get", "create", "update")],
    # certs/bootstrap.py in the caBundle Job
    (CABUNDLE, "create", "secrets", NAMESPACE, ""),
    *[(CABUNDLE, v, "secrets/priogate-webhook-tls", NAMESPACE, "") for v in ("get", "update")],
    *[
        (CABUNDLE, v, f"{k}.admissionregistration.k8s.io/priogate", None, "")
        for v in ("get", "update")
        for k in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ],
]

DENIED: list[tuple[str, str, str, str | None, str]] = [
    # Secrets elsewhere, and other Secrets in priogate's own namespace
    *[(a, "get", "secrets", "kube-system", "") for a in (WEBHOOK, CONTROLLER, CABUNDLE)],
    *[(a, "list", "secrets", NAMESPACE, "") for a in (WEBHOOK, CONTROLLER, CABUNDLE)],
    *[(a, "get", "secrets/other", NAMESPACE, "") for a in (WEBHOOK, CONTROLLER, CABUNDLE)],
    (WEBHOOK, "create", "secrets", NAMESPACE, ""),
    # The serving containers' account never changes webhook configurations (rbac.yaml)
    *[
        (WEBHOOK, v, f"{k}.admissionregistration.k8s.io/priogate", None, "")
        for v in ("update", "patch", "delete")
        for k in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ],
    *[
        (a, "create", "validatingwebhookconfigurations.admissionregistration.k8s.io", None, "")
        for a in (WEBHOOK, CONTROLLER, CABUNDLE)
    ],
    (CABUNDLE, "update", "validatingwebhookconfigurations.admissionregistration.k8s.io/other", None, ""),
    (CONTROLLER, "update", "mutatingwebhookconfigurations.admissionregistration.k8s.io/priogate", None, ""),
    # nothing creates pods or touches nodes; the webhook deletes nothing
    *[(a, "create", "pods", TENANT_NS, "") for a in (WEBHOOK, CONTROLLER, CABUNDLE)],
    (CONTROLLER, "update", "nodes", None, ""),
    (WEBHOOK, "delete", "pods", TENANT_NS, ""),
    # the enrolment label is patched, never more: no namespace update, create or delete, and no
    # PodGroup write beyond the (always refused) dry-run probe's create
    *[(a, v, "namespaces", None, "") for a in (WEBHOOK, CONTROLLER) for v in ("update", "create", "delete")],
    *[(WEBHOOK, v, "podgroups.scheduling.volcano.sh", TENANT_NS, "") for v in ("update", "patch", "delete")],
    (WEBHOOK, "delete", "configmaps", TENANT_NS, ""),
    # the ledgers live in priogate's namespace: no ConfigMap rights anywhere else
    *[
        (a, v, "configmaps", ns, "")
        for a in (WEBHOOK, CONTROLLER)
        for v in ("get", "list", "create", "update")
        for ns in ("kube-system", TENANT_NS)
    ],
    # the Lease is the controller's, in priogate's namespace only
    (CONTROLLER, "create", "leases.coordination.k8s.io", "kube-system", ""),
    (WEBHOOK, "update", "leases.coordination.k8s.io", NAMESPACE, ""),
    # status is the controller's, not the webhook's
    (WEBHOOK, "update", "podgroups.scheduling.volcano.sh", TENANT_NS, "status"),
    # RBAC itself
    *[
        (a, "create", "clusterrolebindings.rbac.authorization.k8s.io", None, "")
        for a in (WEBHOOK, CONTROLLER, CABUNDLE)
    ],
    *[
        (a, "escalate", "clusterroles.rbac.authorization.k8s.io", None, "")
        for a in (WEBHOOK, CONTROLLER, CABUNDLE)
    ],
]


def can_i(kubectl: Kubectl, account: str, verb: str, resource: str, namespace: str | None, sub: str) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    extra = [f"--subresource={sub}"] if sub else []
    r = kubectl("auth", "can-i", verb, resource, *scope, *extra, f"--as={sa(account)}", check=False)
    assert r.stdout.strip() in ("yes", "no"), r.stdout + r.stderr
    return r.stdout.strip() == "yes"


def case_id(case: tuple[str, str, str, str | None, str]) -> str:
    account, verb, resource, ns, sub = case
    return f"{account.removeprefix('priogate-')}:{verb}:{resource}{'/' + sub if sub else ''}@{ns or '*'}"


@pytest.mark.parametrize("case", ALLOWED, ids=[case_id(c) for c in ALLOWED])
def test_rbac_allows_every_call_the_code_makes(release: str, kubectl: Kubectl, case: tuple) -> None:
    assert can_i(kubectl, *case), f"{case_id(case)} should be allowed"


@pytest.mark.parametrize("case", DENIED, ids=[case_id(c) for c in DENIED])
def test_rbac_denies_what_priogate_must_not_do(release: str, kubectl: Kubectl, case: tuple) -> None:
    assert not can_i(kubectl, *case), f"{case_id(case)} should be denied"
