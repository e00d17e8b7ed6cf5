"""Single-pod preemption applied: priogate's preemptor mode (`run --pod-preemption`), where
kube-scheduler's DefaultPreemption PostFilter is disabled (manifests/scheduler/) and priogate
preempts for every pod kube-scheduler fails to place.

A sweep takes the pending pods the scheduler tried and could not place (PodScheduled=False,
reason Unschedulable), in the engine's preemptor order (priority, highest first, then creation
time: engine.Preemptor.order, the seed design's order), and asks the engine, on the state kept
current from the watch caches (controller/engine_state.py), for each pod's decision
(engine.decide_pod: the same function `python -m controller simulate` runs per pod). The
engine applies kube-scheduler's eligibility (preemptionPolicy Never; a pod whose nominated node
still holds terminating lower-priority victims waits: PodEligibleToPreemptOthers) and leaves
the members of a gang still short of minMember to the gang preemptor.

The first pod with a decision to preempt is acted on, as kube-scheduler's PostFilter and
executor do (pkg/scheduler/framework/preemption/preemption.go, executor.go):
1. at once: status.nominatedNodeName on the preemptor (uid precondition), and each victim's
   DisruptionTarget condition (reason PreemptionByPriogate). kube-scheduler keeps a
   nomination another component wrote: its queue records nominations from pod updates
   (UpdateNominatedPod) and tries the nominated node first (evaluateNominatedNode), and with no
   PostFilter result the nomination is left as it is (NominatingInfo nil, ModeNoop);
2. once the nomination is stored (if it is refused, no victim is deleted): lower-priority pods
   nominated to that node lose their nomination (getLowerPriorityNominatedPods: they may no
   longer fit and should look elsewhere);
3. the victims in parallel, each: DELETE with its grace period and a uid precondition, then a
   Preempted Event naming the preemptor (controller/victims.py, shared with the gang
   preemptor);
4. a Normal Event on the preemptor.
Events go out from the recorder's own thread in the controller (controller/events.py). A
write that finds its pod gone or replaced (404, 409, uid refused) skips it. Then the sweep
ends: the next one starts once the watch shows the writes (the nomination, the victims
terminating or gone), so no decision is taken on a state that does not show the last one; an
event about that preemptor or its victims runs the waiting sweep at once (`awaits`).

A pod that --pdb-mode strict alone keeps pending gets a Warning Event PreemptionBlocked with
the engine's reason, once per pod and reason: with DefaultPreemption disabled, kube-scheduler's
own FailedScheduling message no longer says anything about preemption (its "preemption: ..."
part comes from the PostFilter), so this is where an operator learns why the pod waits.

Nothing is recorded: as in kube-scheduler, a crash mid-way leaves a nominated pod and some
victims terminating, and the next decision sees both (the pod waits for its victims, or
decides again).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog

from controller.caches import Caches
from controller.engine_state import EngineState
from controller.events import EventRecorder
from controller.victims import NotLeader, Preemptor, Taken, VictimWriter
from priogate import preemption_record as record
from priogate.clock import micro_time
from priogate.kube.client import ApiClient
from priogate.podgroup import TERMINAL_POD_PHASES
from priogate.preemption.outcome import PDB_STRICT_REASON, Outcome
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption_record import Victim

log = structlog.get_logger("priogate.controller.pod_preemption")

SWEEP_KEY = "pods:preempt"
# How long a sweep waits for the watch to show the last preemption's writes before it decides
# again anyway (a write the watch never shows, e.g. a pod replaced meanwhile, must not stop it).
CATCH_UP_SECONDS = 10.0
RECHECK_SECONDS = 0.2
# Concurrent writes of one preemption (the nomination, the victims): each waits on the network.
WRITERS = 4


def candidate(pod: Mapping[str, Any]) -> bool:
    """A pod the scheduler tried and could not place: unbound, not terminating, not finished,
    PodScheduled=False with reason Unschedulable (what kube-scheduler's PostFilter runs for)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase") or ""
    return (
        not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and phase not in TERMINAL_POD_PHASES
        and record.unschedulable(pod)
    )


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def lower_nominations(
    pods: Iterable[Mapping[str, Any]], node: str, below: int, preemptor: str
) -> list[Mapping[str, Any]]:
    """The pending pods nominated to `node` with a priority below `below`, other than the
    preemptor: kube-scheduler's getLowerPriorityNominatedPods, whose nominations it clears."""
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("nominatedNodeName") == node
        and not (p.get("spec") or {}).get("nodeName")
        and not (p.get("metadata") or {}).get("deletionTimestamp")
        and _priority(p) < below
        and pod_key(p) != preemptor
    ]


@dataclass(frozen=True)
class Applied:
    """A preemption the watch must show before the next decision."""

    namespace: str
    name: str
    uid: str
    node: str
    victims: tuple[Victim, ...]
    at: float


def caught_up(applied: Applied, pods: Callable[[str, str], Mapping[str, Any] | None]) -> bool:
    """The caches show `applied`: the preemptor nominated to its node (or bound, or gone) and
    every victim terminating or gone."""
    pod = pods(applied.namespace, applied.name)
    if pod is not None and (pod.get("metadata") or {}).get("uid") == applied.uid:
        bound = (pod.get("spec") or {}).get("nodeName")
        if not bound and (pod.get("status") or {}).get("nominatedNodeName") != applied.node:
            return False
    for v in applied.victims:
        victim = pods(v.namespace, v.name)
        meta = (victim or {}).get("metadata") or {}
        if victim is not None and meta.get("uid") == v.uid and not meta.get("deletionTimestamp"):
            return False
    return True


@dataclass(frozen=True)
class Sweep:
    result: str  # "preempted", "waiting", "idle", "gone"
    recheck_after: float | None = None  # sweep again after this many seconds


class PodPreemptor:
    def __init__(
        self,
        client: ApiClient,
        caches: Caches,
        events: EventRecorder,
        is_leader: Callable[[], bool],
        *,
        policy: PreemptionPolicy = DEFAULT_POLICY,
        engine: EngineState | None = None,
        on_applied: Callable[[int], None] = lambda victims: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.caches = caches
        self.engine = engine or EngineState.attach(caches)
        self.events = events
        self.is_leader = is_leader
        self.policy = policy
        self.on_applied = on_applied
        self.clock = clock
        self.writer = VictimWriter(client, caches.pods.get, events, self._guard)
        # A preemption's writes that need not wait for each other go out at once (apply).
        self.pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="preemption-writes")
        self.last: Applied | None = None
        # pod uid -> the PDB reason last told in an Event (only pods still candidates are kept)
        self.told: dict[str, str] = {}

    def _guard(self) -> None:
        if not self.is_leader():
            raise NotLeader("leadership lost during a pod preemption")

    def awaits(self, pod: Mapping[str, Any]) -> bool:
        """`pod` is the last preemption's preemptor or one of its victims: an event about it
        may be the one that shows the writes, so the sweep waiting for them runs again now
        rather than at its next recheck."""
        last = self.last
        if last is None:
            return False
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name", "")
        return (namespace, name) == (last.namespace, last.name) or any(
            (namespace, name) == (v.namespace, v.name) for v in last.victims
        )

    def candidates(self) -> list[str]:
        """The keys of the pods to decide for, in the engine's preemptor order."""
        return self.engine.order(pod_key(p) for p in self.caches.pods.items() if candidate(p))

    def sweep(self) -> Sweep:
        if self.last is not None:
            if not caught_up(self.last, self.caches.pods.get) and (
                self.clock() - self.last.at < CATCH_UP_SECONDS
            ):
                return Sweep("waiting", RECHECK_SECONDS)
            self.last = None
        keys = self.candidates()
        self._forget_told(keys)
        for key in keys:
            outcome = self.engine.decide_pod(key, policy=self.policy, now=time.time())
            if outcome.status == "unresolved" and outcome.reason.startswith(PDB_STRICT_REASON):
                self._tell_blocked(key, outcome.reason)
            if outcome.status != "preempt" or outcome.node is None:
                continue
            result = self.apply(key, outcome)
            # Once the watch shows these writes, the next pod is decided.
            return Sweep(result, RECHECK_SECONDS)
        return Sweep("idle")

    def _uid(self, key: str) -> str:
        namespace, _, name = key.partition("/")
        return ((self.caches.pods.get(namespace, name) or {}).get("metadata") or {}).get("uid", "")

    def _forget_told(self, keys: Iterable[str]) -> None:
        current = {self._uid(k) for k in keys}
        self.told = {uid: reason for uid, reason in self.told.items() if uid in current}

    def _tell_blocked(self, key: str, reason: str) -> None:
        """A Warning Event on a pod only PDB-violating victims would make room for, once per
        reason (a sweep runs on every pod event and resync: the same Event each time is noise)."""
        namespace, _, name = key.partition("/")
        pod = self.caches.pods.get(namespace, name)
        uid = self._uid(key)
        if pod is None or self.told.get(uid) == reason:
            return
        self._guard()
        self.told[uid] = reason
        self.events.emit(
            pod, "Pod", "v1", type_="Warning", reason="PreemptionBlocked", action="Preempt", note=reason
        )

    def apply(self, key: str, outcome: Outcome) -> str:
        namespace, _, name = key.partition("/")
        pod = self.caches.pods.get(namespace, name)
        node = outcome.node
        if pod is None or node is None:
            return "gone"
        uid = (pod.get("metadata") or {}).get("uid", "")
        victims = tuple(self._victim(v.namespace, v.name, v.node_name) for v in outcome.victims)
        log.info(
            "preempting for a pod",
            pod=key,
            node=node,
            victims=[v.key for v in victims],
            reason=outcome.reason,
        )
        by = Preemptor(
            "Pod",
            "v1",
            pod,
            # kube-scheduler's note (executor.go PreemptPod), naming the preemptor by uid.
            f"Preempted by pod {uid} on node {node} (priogate, for {key})",
        )
        now = micro_time(dt.datetime.now(dt.UTC))
        # The nomination and the victims' DisruptionTarget conditions at once, as kube-scheduler
        # writes the preemptor's status while its preemption goroutine marks and deletes the
        # victims (executor.go prepareCandidateAsync); a victim is deleted only once the
        # nomination is stored, so the scheduler keeps the room it leaves for the preemptor.
        # Under --pdb-mode strict the Eviction API writes the condition itself.
        strict = self.policy.pdb_mode == "strict"
        nomination = self.pool.submit(self.writer.nominate, namespace, name, node, uid)
        marks = [] if strict else [self.pool.submit(self.writer.mark, v, by, now) for v in victims]
        marked = [m.result() for m in marks]
        if not nomination.result():
            # Gone, replaced or bound meanwhile: no victim is deleted. A condition written
            # meanwhile stays until kube-controller-manager's disruption controller resets a
            # DisruptionTarget left on a pod not deleted (to False, after 2 minutes:
            # pkg/controller/disruption/disruption.go, stalePodDisruptionTimeout), as after a
            # failed DELETE of kube-scheduler's.
            return "gone"
        if outcome.clear_below is not None:
            for other in lower_nominations(self.caches.pods.items(), node, outcome.clear_below, key):
                self.writer.clear_nomination(other)
        # The victims in parallel, as kube-scheduler's Parallelizer deletes them.
        if strict:
            removed = {v.key: self.pool.submit(self.writer.evict, v, by) for v in victims}
        else:
            removed = {m.victim.key: self.pool.submit(self.writer.remove, m, by) for m in marked}
        results = {key: future.result() for key, future in removed.items()}
        taken = [v for v in victims if results.get(v.key) is Taken.DELETED]
        blocked = [key for key, result in results.items() if result is Taken.BLOCKED]
        self.last = Applied(namespace, name, uid, node, victims, self.clock())
        self.on_applied(len(taken))
        if blocked:
            # --pdb-mode strict: a PDB changed since the decision and kube-apiserver refused the
            # eviction; the pod stays pending and is decided again on the state that shows it.
            self.events.emit(
                pod,
                "Pod",
                "v1",
                type_="Warning",
                reason="PreemptionBlocked",
                action="Preempt",
                note=f"evicting {', '.join(blocked)} would violate a PodDisruptionBudget (--pdb-mode strict)",
            )
        names = ", ".join(v.key for v in victims) or "none (lower-priority pods already terminating there)"
        self.events.emit(
            pod,
            "Pod",
            "v1",
            type_="Normal",
            reason="Preempting",
            action="Preempt",
            note=f"priogate nominated the pod to node {node} and preempted {len(taken)} pod(s): {names}",
        )
        return "preempted"

    def _victim(self, namespace: str, name: str, node: str) -> Victim:
        uid = ((self.caches.pods.get(namespace, name) or {}).get("metadata") or {}).get("uid", "")
        return Victim(namespace, name, uid, node)
