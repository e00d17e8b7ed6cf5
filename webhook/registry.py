"""Rule sets and the one place they are registered.

A rule set is one module under webhook/rules/ exporting RULE_SET. It declares its path, what
kube-apiserver must send it (the webhook configuration's rules) and its handler, a pure
function of the request and a read-only view of the cluster. Adding a rule set is adding its
module to RULE_SET_MODULES; the app routes and the webhook configurations follow from it.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from priogate.ledger.stored_claims import StoredGroups
from webhook.review import AdmissionRequest, Decision


class ClusterView(Protocol):
    """What rule sets may read: watch-backed caches, the ledger's store (quorum reads and ledger
    writes, in turns), and LISTs for the rare admin writes that must see every object of some
    kinds (class_uses, namespaces: a PriorityClass DELETE or new globalDefault)."""

    def priority_classes(self) -> Mapping[str, Mapping]: ...

    def default_priority_class(self) -> Mapping | None: ...

    def stored_priority_class(self, name: str) -> Mapping | None: ...

    def class_uses(self, name: str, deadline: float) -> list[Any]: ...

    def namespaces(self, deadline: float) -> list[Mapping]: ...

    def namespace_default_class(self, namespace: str) -> str | None: ...

    def resource_quotas(self, namespace: str) -> list[Mapping]: ...

    def live_podgroups(self, namespace: str) -> Mapping[str, bool]: ...

    def stored_podgroups(self, namespace: str) -> dict[str, Any]: ...

    def stored_groups(self, namespace: str) -> StoredGroups: ...

    def podgroups_generation(self, namespace: str) -> int: ...

    def podgroup(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def reservations(self, namespace: str) -> Any: ...

    def listed_podgroups(self, namespace: str) -> dict[str, str]: ...

    def enroll(self, namespace: str, deadline: float) -> bool: ...

    def probe_refusal(self, namespace: str) -> str | None: ...

    def preemption_preview(self, kind: str, obj: Mapping[str, Any]) -> Any: ...

    @property
    def ledger_store(self) -> Any: ...

    @property
    def in_flight(self) -> dt.timedelta: ...


Handler = Callable[[AdmissionRequest, ClusterView], Decision]


@dataclass(frozen=True)
class RuleSet:
    name: str  # the webhook's name in the configuration, a DNS name
    path: str
    kind: Literal["mutating", "validating"]
    handler: Handler
    api_groups: Sequence[str]
    api_versions: Sequence[str]
    resources: Sequence[str]
    operations: Sequence[str]
    # Further (resource/subresource, operations) rules of the same hook, e.g. pods/resize for
    # UPDATE only, so other updates of the resource are not sent.
    subresource_rules: Sequence[tuple[str, Sequence[str]]] = ()
    side_effects: Literal["None", "NoneOnDryRun"] = "None"
    timeout_seconds: int = 5
    # Which caches must be synced before the rule set can answer.
    needs: Sequence[str] = field(default_factory=tuple)
    # Whether it answers from a stale cache (listed once, its watch down since): see
    # answer_review in webhook/endpoints.py. False: it refuses with "retry" instead.
    answers_from_stale: bool = False
    # kube-apiserver's built-in Priority plugin enforces the same rules when it is enabled, so
    # the hook may then exempt system namespaces and fail open (docs/modes.md).
    builtin_fallback: bool = False
    # With the built-in plugin kept, the hook can only agree with it: the plugin has already
    # decided (it runs before the webhooks), so calling it costs a round trip and changes no
    # answer. webhook/policy.py leaves such a hook unregistered in that mode (docs/modes.md).
    builtin_equivalent: bool = False
    # The reverse: a hook that only does something after the plugin has (it corrects what the
    # plugin filled in), so webhook/policy.py registers it only with the plugin kept.
    builtin_companion: bool = False
    # CEL matchConditions (admissionregistration.k8s.io/v1, KEP-3716, GA in 1.30): kube-apiserver
    # calls the hook only when every one is true, so requests the handler would allow unchanged
    # never cost a round trip. (name, expression) pairs; each must hold for every request the
    # handler could refuse or patch, and must not fail on one (an error applies failurePolicy).
    match_conditions: Sequence[tuple[str, str]] = ()
    # Further namespaceSelector matchExpressions, (key, operator, values), beside the mode's
    # exempt namespaces: the quota hooks are called only in namespaces priogate has enrolled
    # (priogate.scope), the enrolment hook only in the others.
    namespace_labels: Sequence[tuple[str, str, Sequence[str]]] = ()
    # Which server answers it in a cluster (SERVERS). The priority rule sets are pure CPU over
    # one small cache; the quota rule sets keep every pod in their caches and block on ledger
    # writes. They want different thread counts and memory, so they run as separate servers.
    server: Literal["priority", "quota", "preview"] = "priority"
    # Whether its decisions take a turn on the namespace's ledger: such an admission is relayed
    # to the replica that holds the turn (webhook/ledger_relay.py).
    ledger_turn: bool = False
    # What it decides without a turn (a malformed object, a claim the cached stored objects
    # already leave no room for), or None: the admission needs the turn. Called before relaying,
    # so a replica answers those itself and the turn holder takes only the turns; `handler` does
    # the same checks first when it decides the admission itself.
    before_turn: Callable[[AdmissionRequest, ClusterView], Decision | None] | None = None
    # Advisory: it only ever allows, with warnings (the preemption preview). kube-apiserver
    # ignores its failures (failurePolicy Ignore, whatever the mode), and it never refuses, not
    # even while its caches are not listed yet (webhook/endpoints.py): it then warns nothing.
    advisory: bool = False


# Threads per worker for each server: the pool webhook/asgi.py runs what may block on (the quota
# hooks, which wait for ledger turns and quorum reads; Flask's routes). Priority admissions are
# answered on the event loop and use none. Threads start only as requests need them, so an idle
# pool costs nothing. The quota path blocks on ledger writes, where a namespace's waiting
# requests share one write (make bench-quota), so it wants many.
# The preview server answers only dry-run creates (the preemption preview), rare and made by
# people: a few threads. It is off unless asked for (`--serve ...,preview`; the chart's
# preemptionPreview), because its caches hold every pod and node.
SERVERS = {"priority": 8, "quota": 64, "preview": 8}


RULE_SET_MODULES = (
    "webhook.rules.pod_priority",
    "webhook.rules.native_podgroup_priority",
    "webhook.rules.priorityclasses",
    "webhook.rules.podgroup_defaults",
    "webhook.rules.podgroup_quota",
    "webhook.rules.podgroup_enrolment",
    "webhook.rules.podgroup_annotations",
    "webhook.rules.pod_quota",
    "webhook.rules.quota_fence",
    "webhook.rules.pod_gate",
    "webhook.rules.pod_gate_guard",
    "webhook.rules.namespace_default_label",
    "webhook.rules.namespace_default_class",
    "webhook.rules.namespace_default_native",
    "webhook.rules.preemption_preview",
    "webhook.rules.podgroup_preemption_preview",
)


def load_rule_sets(
    modules: Sequence[str] = RULE_SET_MODULES, servers: Sequence[str] | None = None
) -> list[RuleSet]:
    """The registered rule sets, or those answered by the given servers."""
    unknown = set(servers or ()) - set(SERVERS)
    if unknown:
        raise ValueError(f"unknown server {sorted(unknown)}; choose from {', '.join(SERVERS)}")
    rule_sets = [importlib.import_module(m).RULE_SET for m in modules]
    rule_sets = [r for r in rule_sets if servers is None or r.server in servers]
    paths = [r.path for r in rule_sets]
    if len(set(paths)) != len(paths):
        raise ValueError(f"two rule sets share a path: {paths}")
    return rule_sets


def fresh_needs(rule_sets: Sequence[RuleSet]) -> set[str]:
    """The caches some rule set will not answer from while stale: readiness follows them."""
    return {name for r in rule_sets if not r.answers_from_stale for name in r.needs}


def default_threads(servers: Sequence[str]) -> int:
    return max(SERVERS[s] for s in servers)
