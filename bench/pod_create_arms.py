"""The arms `make bench-pod-create` interleaves (bench/pod_create.py): each a switch that puts the
cluster in one configuration, proven by the Bench's probes before a batch runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bench import class_access_arm
from webhook.policy import WebhookPolicy

if TYPE_CHECKING:
    from bench.pod_create import Bench

Arms = dict[str, Callable[[], None]]


def kept(bench: Bench, policy: WebhookPolicy, class_access: str | None, *, preview: bool) -> Arms:
    """Plugin kept: without, then with priogate's configurations; or, with `class_access`, with and
    without its class access policy; or, with `preview`, with and without the preview hook."""
    if preview:
        return preview_arms(bench, plugin=True)
    if not class_access:
        return {"without priogate": bench.unregister, "priogate": lambda: bench.register(policy, plugin=True)}
    restricted = class_access == "restricted"
    if restricted:
        bench.restrict_a_class()

    def with_policy() -> None:
        bench.register(policy, plugin=True)
        if restricted:
            bench.await_class_access(evaluated=True)

    def without_policy() -> None:
        bench.register(policy, plugin=True)
        if restricted:
            bench.drop_class_access()
        else:  # nothing to prove it by: the switch's settling time covers the informer
            class_access_arm.drop_binding(bench.client)

    return {"priogate without class access": without_policy, "priogate": with_policy}


def replaced(bench: Bench, policy: WebhookPolicy, *, hook_only: bool, preview: bool, floor: bool) -> Arms:
    """Plugin replaced against the built-in plugin alone (each switch restarts kube-apiserver when
    the plugin changes); with `preview`, with and without the preview hook instead; with `floor`,
    a third arm: a constant in-process policy."""

    def builtin() -> None:
        bench.unregister()
        bench.restart(True)

    def priogate() -> None:
        bench.restart(False)
        bench.register(policy, plugin=False)
        if hook_only:
            bench.drop_policy()
        else:
            bench.await_policy()

    def constant() -> None:
        bench.unregister()
        bench.restart(False)
        bench.apply_floor()
        bench.await_resolved()

    arms: Arms = {"built-in plugin": builtin, "priogate": priogate}
    if preview:
        if bench.cluster.mode.priority_plugin:
            bench.restart(False)
        arms = preview_arms(bench, plugin=False)
    if floor:
        arms["constant policy"] = constant
    return arms


def preview_arms(bench: Bench, *, plugin: bool) -> Arms:
    """priogate without, then with, the preemption preview hook, in the mode kube-apiserver runs
    (no restart between the arms)."""

    def arm(on: bool) -> Callable[[], None]:
        def switch() -> None:
            bench.register(WebhookPolicy.for_mode(priority_plugin=plugin, preemption_preview=on), plugin)
            if not plugin:
                bench.await_policy()
            bench.await_preview(called=on)

        return switch

    return {"priogate without the preview": arm(False), "priogate": arm(True)}
