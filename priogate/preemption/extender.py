"""priogate's policies applied to kube-scheduler's own preemption candidates (a preempt
extender, KEP-1819): which candidate nodes stay, and with which victims.

kube-scheduler's DefaultPreemption finds candidate nodes by running every Filter plugin
(SelectVictimsOnNode, pkg/scheduler/framework/plugins/defaultpreemption), so it sees what the
engine does not model: inter-pod affinity and anti-affinity, hostPorts, volume restrictions and
limits, DRA claims. It then calls each preempt extender with the candidates as node -> victims
(Evaluator.callExtenders, pkg/scheduler/framework/preemption/preemption.go) and picks among the
nodes the extender returns, with the victims the extender returns. Victims must be pods of that
node in the scheduler's snapshot (HTTPExtender.convertToVictims, pkg/scheduler/extender.go) and a
node returned with no victim is an error ("expected at least one victim pod on node").

A member of a PodGroup still short of minMember gets no node: gang preemption places the needed
members together (the controller's), as the engine's decide_pod leaves such a pod to its gang.

How each policy is applied here (docs/preemption.md, "The preemptor mode"):

- policies that only remove candidates are exact: a DaemonSet or mirror pod among the victims,
  an opted-out pod under `--opt-out-mode hard`, victims exceeding a PodDisruptionBudget under
  `--pdb-mode strict`, victims leaving a running PodGroup below minMember under
  `--gang-aware-victims` (unless they take it whole), and the start delay (keep nothing);
- where a policy wants other victims on a node (a hard rule broken by the scheduler's victims,
  soft opt-out, victim classes, QoS order, the single/multiple strategies), the engine computes
  them only when the node is "transparent": the preemptor and every pod on or nominated to the
  node carry none of inter-pod affinity, hostPorts, volumes other than configMap, secret,
  emptyDir, downwardAPI and projected, resource claims (and the preemptor no hard topology
  spread constraint). On such a node the filters the engine does not run cannot depend on
  which pods leave, so a fit by resources and the static filters is kube-scheduler's fit.
  Elsewhere the scheduler's victims stay when they satisfy the hard rules, else the node goes.
- the single and multiple strategies choose one node among the candidates; kube-scheduler's
  strategy keeps every node, only those with the fewest opted-out (soft mode) and owner/driver
  victims (victim classes) when those policies are on, and kube-scheduler's node order decides.

With every policy at its default and no opted-out, DaemonSet or mirror pod among the victims,
the candidates come back unchanged.

Victims are pod keys ("namespace/name") here; the HTTP layer maps kube-scheduler's UIDs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from priogate.preemption.extender_gangs import broken_group, gang_member
from priogate.preemption.fit import Need, need_of, to_vector
from priogate.preemption.nodes import Candidate, nominated_load
from priogate.preemption.policy import KUBE_SCHEDULER, MULTIPLE, SINGLE, PreemptionPolicy
from priogate.preemption.records import PodInfo
from priogate.preemption.shaped import FAILURE_TEXT, Failure, Shaping, evaluate, exceeds_pdbs
from priogate.preemption.single import start_delay_wait
from priogate.preemption.state import ClusterState, importance_key
from priogate.preemption.strategies import (
    closest_victim,
    deviation,
    fewest_victims,
    pdb_violations_of,
)


@dataclass(frozen=True, slots=True)
class Victims:
    """A candidate node's victims (pod keys, most important first as given) and kube-scheduler's
    count of PDB violations among them (extenderv1.MetaVictims.NumPDBViolations)."""

    pods: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class Shaped:
    nodes: dict[str, Victims]  # kept, each with its victims
    reasons: dict[str, str]  # node -> why it was dropped or its victims changed
    # Nothing kept only because the pod waits by design (the start delay) or is its gang's to
    # preempt for: no block worth a Warning.
    waiting: bool = False
    # ... because its PodGroup's gang preemption places it: a nomination it carries is the
    # gang's (the controller's gang preemptor writes it), not stale.
    gang: bool = False

    @property
    def unchanged(self) -> bool:
        return not self.reasons


@dataclass(frozen=True, slots=True)
class _Option:
    victims: tuple[PodInfo, ...]
    pdb_violations: int
    replaced: bool  # the engine's victims, not the scheduler's
    rank: tuple = ()  # the strategy's order between nodes, smaller first


class _Context:
    def __init__(
        self,
        preemptor: PodInfo,
        candidates: Mapping[str, Victims],
        state: ClusterState,
        policy: PreemptionPolicy,
        blind: Callable[[str], str],
    ) -> None:
        self.pod = preemptor
        self.candidates = candidates
        self.state = state
        self.policy = policy
        self.blind = blind
        self.reasons: dict[str, str] = {}
        self.need: Need | None = _need(preemptor, state)
        self.victims: dict[str, tuple[PodInfo, ...]] = {}
        for node, given in candidates.items():
            pods = [state.pods.get(key) for key in given.pods]
            if not given.pods:
                self.reasons[node] = "no victims given"
            elif any(p is None or p.node_name != node for p in pods):
                # Fail closed: a victim priogate has not seen there cannot be checked.
                self.reasons[node] = "a victim is not (yet) on this node in priogate's view"
            else:
                self.victims[node] = tuple(p for p in pods if p is not None)
        self.opaque = self._opaque_reason()
        self._transparent: dict[str, str] = {}

    def _opaque_reason(self) -> str:
        if self.need is None:
            return "the preemptor asks for a resource no node in priogate's view has"
        why = self.blind(self.pod.key)
        if why:
            return f"the preemptor has {why}"
        if self.pod.spread:
            return "the preemptor has hard topology spread constraints"
        return ""

    def named(self, pod: PodInfo) -> str:
        """A pod as a reason names it: by name in the preemptor's namespace, else not at all (the
        reasons reach the preemptor's namespace in an Event: another tenant's pod names stay
        theirs)."""
        return f"pod {pod.key}" if pod.namespace == self.pod.namespace else "a pod of another namespace"

    def opacity(self, node: str) -> str:
        """Why the engine cannot compute other victims on `node`, or ""."""
        if self.opaque:
            return self.opaque
        if node not in self._transparent:
            why = ""
            state = self.state.nodes.get(node)
            if state is None:
                why = "node not in priogate's view"
            else:
                for pod in (*state.pods, *self.state.nominated.get(node, ())):
                    found = self.blind(pod.key)
                    if found:
                        why = f"{self.named(pod)} there has {found}"
                        break
            self._transparent[node] = why
        return self._transparent[node]

    def hard(self, victims: Sequence[PodInfo], include_opted_out: bool) -> str:
        """Which rule these victims break, or ""."""
        for pod in victims:
            if pod.protected:
                return f"{self.named(pod)} is a {pod.protected}: never a victim"
            if pod.opted_out and not include_opted_out:
                return (
                    f"{self.named(pod)} opted out of preemption (--opt-out-mode {self.policy.opt_out_mode})"
                )
        if self.policy.pdb_mode == "strict" and exceeds_pdbs(self.state, victims):
            return "victims would exceed a PodDisruptionBudget's allowance (--pdb-mode strict)"
        if self.policy.gang_aware_victims:
            broken = broken_group(self.state, victims)
            if broken:
                return f"victims would leave PodGroup {broken} below minMember (--gang-aware-victims)"
        return ""

    def candidate(self, node: str, include_opted_out: bool) -> Candidate | None:
        """The engine's view of `node` for the preemptor (screen_nodes' slack for one node)."""
        state, need = self.state.nodes.get(node), self.need
        if state is None or need is None:
            return None
        ranked = state.victims_all if include_opted_out else state.victims_strict
        held = nominated_load(self.state, node, self.pod.priority, (self.pod.key,), need)
        leaving = state.terminating
        last, row = leaving.cum[len(leaving)], leaving.cum[leaving.below(self.pod.priority)]
        slack = [
            state.free[d] - amount - h + last[d] - row[d] for (d, amount), h in zip(need, held, strict=True)
        ]
        return Candidate(state, ranked, ranked.below(self.pod.priority), slack)


def _need(preemptor: PodInfo, state: ClusterState) -> Need | None:
    """The preemptor's request over the state's dimensions. kube-scheduler tries a pod the moment
    it is created, often before the controller's watch shows it: its request then comes from the
    pod kube-scheduler sent. None only when it asks for a resource no node or pod of the state
    has (no policy can place it by resources then)."""
    vector = state.vectors.get(preemptor.key)
    if vector is None:
        if any(name not in state.dims for name in preemptor.requests):
            return None
        vector = to_vector(preemptor.requests, state.dims, pod=True)
    return need_of(vector)


def shape(
    preemptor: PodInfo,
    candidates: Mapping[str, Victims],
    state: ClusterState,
    policy: PreemptionPolicy,
    now: float | None,
    blind: Callable[[str], str] = lambda key: "",
) -> Shaped:
    """The candidates priogate's policies keep, each with its victims, and why the others
    went or changed. `blind(pod key)`: engine_blind of that pod ("" when unknown)."""
    gang = gang_member(state, preemptor)
    if gang:
        return Shaped({}, {node: gang for node in candidates}, waiting=True, gang=True)
    wait = start_delay_wait(preemptor, policy, now)
    if wait:
        return Shaped({}, {node: wait for node in candidates}, waiting=True)
    ctx = _Context(preemptor, candidates, state, policy, blind)
    variants = [False]
    if policy.opt_out_mode == "soft":
        variants.append(True)
    reasons: dict[str, str] = {}
    for include_opted_out in variants:
        for strategy in policy.victim_selection:
            options: dict[str, _Option] = {}
            for node in sorted(ctx.victims):
                found = _option(ctx, node, strategy, include_opted_out)
                if isinstance(found, _Option):
                    options[node] = found
                else:
                    reasons.setdefault(node, found)
            if options:
                return _result(ctx, _choose(strategy, options), strategy, reasons)
    reasons.update(ctx.reasons)
    return Shaped({}, {node: reasons.get(node, "no victims under the policies") for node in candidates})


def _reshapes(policy: PreemptionPolicy, include_opted_out: bool) -> bool:
    """Does the kube-scheduler strategy want the engine's victims even where the scheduler's
    break no rule? (The victim order differs from kube-scheduler's.)"""
    return policy.victim_classes or policy.qos_order or include_opted_out


def _option(ctx: _Context, node: str, strategy: str, include_opted_out: bool) -> _Option | str:
    """The node's victims under `strategy`, or why it has none."""
    given = ctx.victims[node]
    hard = ctx.hard(given, include_opted_out)
    scheduler = _Option(given, ctx.candidates[node].pdb_violations, replaced=False)
    wants_engine = bool(hard) or strategy != KUBE_SCHEDULER or _reshapes(ctx.policy, include_opted_out)
    if not wants_engine:
        return _ranked(ctx, strategy, node, scheduler)
    opaque = ctx.opacity(node)
    engine = "" if opaque else _engine(ctx, node, strategy, include_opted_out)
    if isinstance(engine, _Option):
        return engine
    why = opaque or engine
    if hard:
        return f"{hard}; no other victims: {why}"
    qualified = _qualifies(ctx, strategy, given)
    if qualified:
        return f"{qualified}; no other victims: {why}"
    return _ranked(ctx, strategy, node, scheduler)


def _qualifies(ctx: _Context, strategy: str, victims: Sequence[PodInfo]) -> str:
    """Why the scheduler's victims do not meet `strategy`'s condition, or ""."""
    policy = ctx.policy
    if strategy == SINGLE:
        if len(victims) != 1:
            return f"{len(victims)} victims, the single strategy takes one"
        if ctx.need is None:
            return "the preemptor asks for a resource no node in priogate's view has"
        shaping = Shaping(ctx.state, ctx.pod, ctx.need, policy, True, {})
        off = deviation(shaping, victims[0])
        if off > policy.single_victim_deviation:
            return f"the victim's request deviates {off:.1f}% (more than --single-victim-deviation)"
    elif strategy == MULTIPLE and policy.max_victims and len(victims) > policy.max_victims:
        return f"{len(victims)} victims, more than --max-victims {policy.max_victims}"
    return ""


def _engine(ctx: _Context, node: str, strategy: str, include_opted_out: bool) -> _Option | str:
    """The engine's victims on a transparent node, or why there are none."""
    candidate = ctx.candidate(node, include_opted_out)
    assert ctx.need is not None
    if candidate is None:
        return "node not in priogate's view"
    shaping = Shaping(ctx.state, ctx.pod, ctx.need, ctx.policy, include_opted_out, {})
    victims: tuple[PodInfo, ...]
    if strategy == SINGLE:
        found = closest_victim(shaping, candidate)
        if found is None:
            return FAILURE_TEXT["deviation"]
        victims = (found[1],)
    elif strategy == MULTIPLE:
        result = fewest_victims(shaping, candidate)
        if isinstance(result, Failure):
            return FAILURE_TEXT[result.kind]
        victims = result
    else:
        evaluated = evaluate(shaping, candidate)
        if isinstance(evaluated, Failure):
            return FAILURE_TEXT[evaluated.kind]
        victims = evaluated.victims
    if not victims:
        # The engine sees room already (terminating pods, or a view behind the scheduler's):
        # an extender may not return a node without victims.
        return "priogate's view finds room without victims"
    if any(p.node_name != node for p in victims):
        return "the policies would take a PodGroup whole beyond this node"
    hard = ctx.hard(victims, include_opted_out)
    if hard:
        return hard
    option = _Option(
        tuple(sorted(victims, key=importance_key)), pdb_violations_of(shaping, victims), replaced=True
    )
    return _ranked(ctx, strategy, node, option, shaping)


def _ranked(
    ctx: _Context, strategy: str, node: str, option: _Option, shaping: Shaping | None = None
) -> _Option:
    """`option` with its rank between nodes under `strategy`."""
    need = ctx.need
    shaping = shaping or (Shaping(ctx.state, ctx.pod, need, ctx.policy, True, {}) if need else None)
    victims = option.victims
    opted_out = sum(1 for p in victims if p.opted_out)
    owners = (
        sum(1 for p in victims if shaping.is_owner(p))
        if shaping is not None and ctx.policy.victim_classes
        else 0
    )
    if strategy == SINGLE and shaping is not None:
        pod = victims[0]
        rank: tuple = (
            opted_out,
            option.pdb_violations,
            deviation(shaping, pod),
            shaping.take_rank(pod),
            pod.priority,
            shaping.qos(pod),
            -pod.start_time,
            node,
        )
    elif strategy == MULTIPLE:
        rank = (opted_out, owners, len(victims), option.pdb_violations, node)
    else:
        rank = (opted_out, owners)
    return _Option(victims, option.pdb_violations, option.replaced, rank)


def _choose(strategy: str, options: dict[str, _Option]) -> dict[str, _Option]:
    """single and multiple: the one best node; kube-scheduler: every node with the fewest
    opted-out and owner victims (its own order decides among them)."""
    if strategy in (SINGLE, MULTIPLE):
        node = min(options, key=lambda n: options[n].rank)
        return {node: options[node]}
    best = min(o.rank for o in options.values())
    return {n: o for n, o in options.items() if o.rank == best}


def _result(ctx: _Context, kept: dict[str, _Option], strategy: str, failed: dict[str, str]) -> Shaped:
    nodes: dict[str, Victims] = {}
    reasons = {node: why for node, why in {**failed, **ctx.reasons}.items() if node not in kept}
    for node, option in kept.items():
        given = ctx.candidates[node]
        if option.replaced and {p.key for p in option.victims} != set(given.pods):
            nodes[node] = Victims(tuple(p.key for p in option.victims), option.pdb_violations)
            reasons[node] = f"victims replaced under the policies ({strategy} strategy)"
        else:
            nodes[node] = given
    for node in ctx.candidates:
        if node not in nodes:
            reasons.setdefault(node, f"another candidate preferred by the {strategy} strategy")
    return Shaped(nodes, reasons)
