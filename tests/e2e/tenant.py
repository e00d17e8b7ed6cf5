"""A tenant: a user who holds the built-in `edit` role in one namespace and nothing else, and
ways to act as them (kubectl --as, and a kubernetes client that sends Impersonate-User).

Hostile-tenant tests run their requests as the tenant, so what they prove holds for a namespace
user of a real cluster, not only for the cluster admin the other e2e tests act as. The admin
client (the test run's kubeconfig, in system:masters) may impersonate anyone; the API server then
authorizes the request as the tenant, with the group system:authenticated it adds to every
impersonated user (staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from priogate import podgroup
from tests.e2e.helpers import Kubectl, delete_namespace, ensure_namespace, unique, wait_for

GROUP, VERSION = podgroup.GROUP_VERSION.split("/")


def impersonating_client(cluster: LocalCluster, user: str) -> k8s.ApiClient:
    """A client of its own (its own Configuration), so the header never leaks into the admin's."""
    api_client = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api_client.set_default_header("Impersonate-User", user)
    return api_client


@dataclass
class Tenant:
    user: str
    namespace: str
    kubectl: Kubectl  # kubectl --as the tenant
    api_client: k8s.ApiClient  # the kubernetes client as the tenant

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api_client)

    def can(self, verb: str, resource: str, group: str = "", subresource: str = "") -> bool:
        """SelfSubjectAccessReview as the tenant, in their namespace."""
        attributes = k8s.V1ResourceAttributes(
            namespace=self.namespace, verb=verb, group=group, resource=resource, subresource=subresource
        )
        review = k8s.V1SelfSubjectAccessReview(
            spec=k8s.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
        )
        return bool(
            k8s.AuthorizationV1Api(self.api_client).create_self_subject_access_review(review).status.allowed
        )

    # ---- PodGroups as the tenant ---------------------------------------------------------------

    def create_podgroup(self, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "podgroups", body, **kw
        )

    def get_podgroup(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "podgroups", name)

    def patch_podgroup(self, name: str, patch: Any) -> dict[str, Any]:
        """A JSON merge patch (a dict) or a JSON patch (a list)."""
        kind = "application/json-patch+json" if isinstance(patch, list) else "application/merge-patch+json"
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "podgroups", name, patch, _content_type=kind
        )

    def delete_podgroup(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "podgroups", name)

    def podgroup_gone(self, name: str) -> bool:
        try:
            self.get_podgroup(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False


def make_tenant(
    cluster: LocalCluster, core: k8s.CoreV1Api, rbac: k8s.RbacAuthorizationV1Api, role: str = "edit"
) -> Tenant:
    """A fresh namespace and a user bound to the built-in ClusterRole `role` in it only. Returns
    once the API server authorizes the tenant to create PodGroups there (or, for `view`, to list
    them): RBAC's caches and the ClusterRole aggregation controller both lag behind a write."""
    user = unique("tenant")
    namespace = unique(f"tenant-{role}")
    ensure_namespace(core, namespace)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{role}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    tenant = Tenant(
        user=user,
        namespace=namespace,
        kubectl=Kubectl(cluster.kubeconfig, as_user=user),
        api_client=impersonating_client(cluster, user),
    )
    verb = "list" if role == "view" else "create"
    wait_for(
        lambda: tenant.can(verb, "podgroups", GROUP),
        60,
        f"user {user} may {verb} podgroups in {namespace} through ClusterRole {role}",
        0.2,
    )
    return tenant


def tenant_fixture(
    cluster: LocalCluster, core: k8s.CoreV1Api, rbac: k8s.RbacAuthorizationV1Api, role: str = "edit"
) -> Iterator[Tenant]:
    tenant = make_tenant(cluster, core, rbac, role)
    try:
        yield tenant
    finally:
        tenant.api_client.close()
        delete_namespace(core, tenant.namespace)
