"""Native PodGroup (scheduling.k8s.io/v1alpha2) requests of tests/data/podgroup-priority-cases.yaml
as real API requests, for tests/e2e/differential.py: the stored spec.priority and
spec.priorityClassName of an admitted group, or the API error of a refused one (raised)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1alpha2", "podgroups"
SPEC_FIELDS = ("priority", "priorityClassName")


def fields(group: Mapping[str, Any]) -> dict[str, Any]:
    spec = group.get("spec") or {}
    return {"priority": spec.get("priority"), "priorityClassName": spec.get("priorityClassName") or None}


class PodGroups:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api = k8s.CustomObjectsApi(api_client)

    def create(self, obj: Mapping[str, Any], ns: str) -> dict[str, Any]:
        body = copy.deepcopy(dict(obj))
        body["metadata"]["namespace"] = ns
        return self.api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    def update(self, op: Mapping[str, Any], ns: str) -> dict[str, Any]:
        """Create oldObject, then PUT the stored group with the case's labels, spec.priority and
        spec.priorityClassName (set, or left out where the case's object has none)."""
        old, new = op["oldObject"], op["object"]
        name = old["metadata"]["name"]
        self.create(old, ns)
        for _attempt in range(5):
            stored = self.api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            stored["metadata"]["labels"] = dict(new["metadata"].get("labels") or {})
            for key in SPEC_FIELDS:
                if key in new["spec"]:
                    stored["spec"][key] = new["spec"][key]
                else:
                    stored["spec"].pop(key, None)
            try:
                return self.api.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, stored)
            except ApiException as e:
                if e.status != 409:  # 409: a controller wrote the group meanwhile
                    raise
        raise RuntimeError(f"PodGroup {ns}/{name} kept changing; could not apply the update")

    def delete_all(self, ns: str) -> None:
        """For kube-system, which is not deleted after a case. The podgroup-protection finalizer is
        kube-controller-manager's to remove once no pod uses the group."""
        self.api.delete_collection_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
