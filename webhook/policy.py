"""The mode policy: which namespaces kube-apiserver does not send to each hook, and what it does
when a call fails, with kube-apiserver's built-in Priority plugin kept or replaced
(docs/modes.md). The shipped manifests and the local control plane both register under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from webhook.registry import RuleSet, load_rule_sets

SYSTEM_NAMESPACES = ("kube-system", "priogate-system")
# The rule sets the built-in Priority plugin also enforces (RuleSet.builtin_fallback). Every
# other rule set (PodGroup quota) is enforced by priogate alone, whatever the mode.
PRIORITY_HOOKS = frozenset(r.name for r in load_rule_sets() if r.builtin_fallback)
# Those that, with the plugin kept, can only agree with it (RuleSet.builtin_equivalent).
BUILTIN_EQUIVALENT_HOOKS = frozenset(r.name for r in load_rule_sets() if r.builtin_equivalent)
# Those that only correct what the plugin filled in (RuleSet.builtin_companion): nothing to do
# without it.
BUILTIN_COMPANION_HOOKS = frozenset(r.name for r in load_rule_sets() if r.builtin_companion)
# The preemption preview's hook: registered only where it is turned on. Its matchCondition keeps
# real creates from calling it, but kube-apiserver converts every pod create for that condition
# (docs/preemption-preview.md, has the measured cost).
PREVIEW_HOOKS = frozenset(r.name for r in load_rule_sets() if r.server == "preview")


@dataclass(frozen=True)
class HookPolicy:
    """Namespaces kube-apiserver does not send to a webhook, and what it does when the call fails."""

    exempt_namespaces: tuple[str, ...]
    failure_policy: Literal["Fail", "Ignore"]

    def __post_init__(self) -> None:
        if self.failure_policy not in ("Fail", "Ignore"):
            raise ValueError(f"failure_policy must be Fail or Ignore, not {self.failure_policy!r}")

    def describe(self) -> str:
        return f"failurePolicy {self.failure_policy}, exempt: {', '.join(self.exempt_namespaces) or 'none'}"


# Advisory hooks (RuleSet.advisory) only warn: a failed call must never refuse a create.
ADVISORY = HookPolicy(SYSTEM_NAMESPACES, "Ignore")


@dataclass(frozen=True)
class WebhookPolicy:
    priority: HookPolicy  # the rule sets with a built-in fallback (PRIORITY_HOOKS)
    others: HookPolicy  # everything else
    # Hooks not registered at all: a call could not change kube-apiserver's answer.
    unregistered: frozenset[str] = frozenset()

    @classmethod
    def for_mode(cls, priority_plugin: bool, preemption_preview: bool = False) -> WebhookPolicy:
        """Plugin enabled: the plugin resolves every pod and guards PriorityClasses before priogate
        is asked, so the priority hooks may skip kube-system and priogate's own namespace, and an
        outage falls back to upstream behaviour (Ignore). Plugin disabled: priogate is the only
        resolver, so nothing is exempt from the priority hooks (an exempt pod gets no priority at
        all) and an outage refuses (Fail) instead of admitting pods without one. The quota hooks
        have no built-in fallback in either mode: Fail, with the system namespaces exempt.
        `preemption_preview` registers the preview hook (off by default: its matchCondition
        costs every pod create kube-apiserver's conversion of the pod for CEL)."""
        others = HookPolicy(SYSTEM_NAMESPACES, "Fail")
        off = frozenset() if preemption_preview else PREVIEW_HOOKS
        if priority_plugin:
            # The pod priority hook only agrees with the plugin, which has already answered
            # (RuleSet.builtin_equivalent): a round trip on every pod create for nothing. The
            # PriorityClass hook stays: it refuses a deletecollection of the system classes,
            # which upstream lets through, and warns about a new globalDefault.
            return cls(HookPolicy(SYSTEM_NAMESPACES, "Ignore"), others, BUILTIN_EQUIVALENT_HOOKS | off)
        return cls(HookPolicy((), "Fail"), others, BUILTIN_COMPANION_HOOKS | off)

    @classmethod
    def in_cluster(
        cls, priority_plugin: bool, namespace: str, preemption_preview: bool = False
    ) -> WebhookPolicy:
        """for_mode, for a webhook that runs in `namespace` of the cluster it serves (the chart).
        With the plugin replaced, a Fail pod priority hook that also covers priogate's own
        namespace deadlocks: no webhook pod can be admitted while no webhook pod answers, and on a
        fresh install none does yet (docs/modes.md, "priogate's own pods"). So the priority hooks
        exempt that namespace, and only it: its pods get no priority resolution, so priogate's
        own pod templates carry the integer of their class themselves (hack/chart_templates.py),
        and nothing else belongs in that namespace. With the plugin kept: for_mode's policy."""
        policy = cls.for_mode(priority_plugin, preemption_preview)
        if priority_plugin:
            return policy
        return cls(
            HookPolicy((namespace,), policy.priority.failure_policy), policy.others, policy.unregistered
        )

    def registers(self, rule_set: RuleSet) -> bool:
        return rule_set.name not in self.unregistered

    def for_rule_set(self, rule_set: RuleSet) -> HookPolicy:
        if rule_set.advisory:
            return ADVISORY
        return self.priority if rule_set.builtin_fallback else self.others

    def describe(self) -> str:
        skipped = f"; not registered: {', '.join(sorted(self.unregistered))}" if self.unregistered else ""
        return f"priority hooks: {self.priority.describe()}; other hooks: {self.others.describe()}{skipped}"
