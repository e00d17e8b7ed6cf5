"""Validating PodGroups: only the controller writes `priogate.io/` annotations.

The controller acts on what it finds in `priogate.io/preemption` (it deletes the victims a
record names), and anyone allowed to edit a PodGroup (a tenant with the built-in `edit`
ClusterRole, once PodGroups aggregate to it) could otherwise write a record naming any pod in
the cluster. So a create, change or removal of any `priogate.io/`-prefixed annotation is
refused unless the request comes from the controller's identity (request.userInfo.username,
as kube-apiserver authenticated it). The controller re-checks every record before acting on
it too (controller/gang_preemptor.py): this rule is the first line, not the only one.

The identity: --controller-username / PRIOGATE_CONTROLLER_USERNAME, by default the
controller's ServiceAccount in manifests/."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from webhook.objects import mapping, new_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny

PREFIX = "priogate.io/"
DEFAULT_CONTROLLER_USERNAME = "system:serviceaccount:priogate-system:priogate-controller"
USERNAME_ENV = "PRIOGATE_CONTROLLER_USERNAME"


def controller_username() -> str:
    return os.environ.get(USERNAME_ENV) or DEFAULT_CONTROLLER_USERNAME


def _ours(obj: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if not obj:
        return {}
    annotations = mapping(mapping(obj, "metadata", where), "annotations", f"{where}.metadata")
    return {k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(PREFIX)}


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The `priogate.io/` annotations created, changed or removed."""
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE"):
        return allow()
    new = _ours(new_object(request), "object")
    old = _ours(request.old_object, "oldObject") if request.operation == "UPDATE" else {}
    keys = changed_keys(old, new)
    if not keys:
        return allow()
    return controller_only(
        request, f"annotation(s) {', '.join(keys)} on PodGroups are written", "the controller acts on them"
    )


def controller_only(request: AdmissionRequest, what: str, why: str) -> Decision:
    """Allowed for the controller's identity (request.userInfo.username, as kube-apiserver
    authenticated it), refused for anyone else: "<what> only by the priogate controller (...),
    not by <user>: <why>"."""
    username = str((request.user or {}).get("username") or "") or "an anonymous user"
    controller = controller_username()
    if username == controller:
        return allow()
    return deny(f"{what} only by the priogate controller ({controller}), not by {username}: {why}", code=403)


RULE_SET = RuleSet(
    name="podgroup-annotations.priogate.io",
    path="/validate/podgroup-annotations",
    kind="validating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE"),
    server="quota",
    # The rule refuses only a write that creates, changes or removes a `priogate.io/` annotation,
    # so a write where neither the new nor the old object carries one (most PodGroup writes:
    # spec, labels, finalizers) never needs a call. Status writes go to podgroups/status, which
    # `resources` does not match.
    match_conditions=(
        (
            "priogate-annotation-present",
            "(has(object.metadata.annotations)"
            f" && object.metadata.annotations.exists(k, k.startsWith('{PREFIX}')))"
            " || (request.operation == 'UPDATE' && has(oldObject.metadata.annotations)"
            f" && oldObject.metadata.annotations.exists(k, k.startsWith('{PREFIX}')))",
        ),
    ),
)
