"""manifests/user-rbac.yaml: PodGroups reach the built-in user roles, and status stays the
controller's. (That the aggregation works against a real API server: tests/e2e/test_tenant.py.)"""

from __future__ import annotations

from pathlib import Path

import yaml

from localcluster.objects import USER_RBAC

ROOT = Path(__file__).resolve().parents[2]
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def roles() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(USER_RBAC.read_text()) if d}


def grants(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_launcher_installs_the_shipped_file():
    assert USER_RBAC == ROOT / "manifests" / "user-rbac.yaml"
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    assert "user-rbac.yaml" in kustomization["resources"]


def test_edit_and_admin_may_write_podgroups_view_may_read_them():
    by_label: dict[str, set[tuple[str, str, str]]] = {"admin": set(), "edit": set(), "view": set()}
    for role in roles().values():
        assert role["kind"] == "ClusterRole" and "aggregationRule" not in role
        for target in by_label:
            if role["metadata"]["labels"].get(AGGREGATE + target) == "true":
                by_label[target] |= grants(role)
    # view is aggregated into edit, edit into admin (the bootstrap policy's own labels).
    by_label["edit"] |= by_label["view"]
    by_label["admin"] |= by_label["edit"]
    g = "scheduling.volcano.sh"
    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert (g, "podgroups", verb) in by_label["edit"]
        assert (g, "podgroups", verb) in by_label["admin"]
    assert by_label["view"] == {
        (g, resource, verb)
        for resource in ("podgroups", "podgroups/status")
        for verb in ("get", "list", "watch")
    }


def test_no_user_role_writes_status():
    for role in roles().values():
        for group, resource, verb in grants(role):
            assert group == "scheduling.volcano.sh"
            assert not (resource.endswith("/status") and verb not in ("get", "list", "watch")), role
            assert "*" not in (resource, verb)
