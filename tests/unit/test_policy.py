"""The mode policy (docs/modes.md) as the generated configurations carry it, hook by hook."""

from __future__ import annotations

import pytest

from webhook.configuration import webhook_configurations
from webhook.policy import PRIORITY_HOOKS, HookPolicy, WebhookPolicy

SYSTEM = ["kube-system", "priogate-system"]


def hooks(priority_plugin: bool) -> dict[str, dict]:
    configs = webhook_configurations(
        "https://127.0.0.1:1", b"ca", policy=WebhookPolicy.for_mode(priority_plugin=priority_plugin)
    )
    return {h["name"]: h for c in configs for h in c["webhooks"]}


def exempt(hook: dict) -> list[str]:
    return [v for e in hook.get("namespaceSelector", {}).get("matchExpressions", []) for v in e["values"]]


def test_the_priority_hooks_are_the_rule_sets_the_plugin_also_enforces():
    assert {"pod-priority.priogate.io", "priorityclasses.priogate.io"} == PRIORITY_HOOKS


@pytest.mark.parametrize(
    ("priority_plugin", "priority_exempt", "priority_failure"),
    [(False, [], "Fail"), (True, SYSTEM, "Ignore")],
)
def test_each_hook_gets_its_mode(priority_plugin, priority_exempt, priority_failure):
    for name, hook in hooks(priority_plugin).items():
        if name in PRIORITY_HOOKS:
            assert (exempt(hook), hook["failurePolicy"]) == (priority_exempt, priority_failure), name
        else:
            assert (exempt(hook), hook["failurePolicy"]) == (SYSTEM, "Fail"), name


def test_an_unknown_failure_policy_is_refused():
    with pytest.raises(ValueError, match="Fail or Ignore"):
        HookPolicy((), "Maybe")  # type: ignore[arg-type]
