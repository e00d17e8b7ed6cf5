"""What the local cluster creates through kube-apiserver besides priogate's programs: the kwok fake
nodes, the project's CRDs and the user ClusterRoles."""

from __future__ import annotations

import yaml

from localcluster import components
from localcluster.api import create_or_replace
from localcluster.binaries import REPO
from localcluster.options import Options
from localcluster.procs import progress, wait_until
from priogate.kube.client import ApiClient

NODE_PREFIX = "kwok-node-"
CRD_DIR = REPO / "manifests" / "crds"
CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# The ClusterRoles aggregated into the built-in admin, edit and view roles (PodGroups for users).
USER_RBAC = REPO / "manifests" / "user-rbac.yaml"
CLUSTERROLE_API = "/apis/rbac.authorization.k8s.io/v1/clusterroles"


def install_crds(api: ApiClient) -> None:
    """The project's CRDs (PodGroup): the webhook watches them; and the user ClusterRoles."""
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                create_or_replace(api, CRD_API, doc)
                names.append(doc["metadata"]["name"])

    def established() -> bool:
        for name in names:
            conditions = api.get(f"{CRD_API}/{name}").get("status", {}).get("conditions", [])
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(established, timeout=30, what=f"CRDs {', '.join(names)} are Established")
    progress(f"installed CRDs {', '.join(names)}")
    # With the CRDs, as `kubectl apply -k manifests/` installs them: without these roles a
    # namespace user bound to `edit` cannot create a PodGroup at all.
    for doc in yaml.safe_load_all(USER_RBAC.read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            create_or_replace(api, CLUSTERROLE_API, doc)


def create_fake_nodes(api: ApiClient, o: Options) -> None:
    """The kwok fake nodes, NODE_PREFIX and a number, each with Options' node resources."""
    resources = {
        "cpu": o.node_cpu,
        "memory": o.node_memory,
        "ephemeral-storage": o.node_ephemeral_storage,
        "pods": str(o.node_pods),
    }
    for i in range(o.nodes):
        name = f"{NODE_PREFIX}{i}"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {components.KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
            },
            "spec": {},
            "status": {"allocatable": resources, "capacity": resources},
        }
        create_or_replace(api, "/api/v1/nodes", node)
