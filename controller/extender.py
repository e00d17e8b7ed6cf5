"""kube-scheduler's preempt extender, served by the controller: `POST /scheduler/preempt` over
HTTPS (the preemptor mode, docs/preemption.md "The preemptor mode").

kube-scheduler's DefaultPreemption finds the candidate nodes and their victims with every filter
it has, then calls this endpoint (Evaluator.callExtenders, pkg/scheduler/framework/preemption/
preemption.go; HTTPExtender.ProcessPreemption, pkg/scheduler/extender.go) and nominates and
preempts among the nodes it answers, with the victims it answers. The answer is
priogate.preemption.extender.shape on the engine state kept from the watch caches
(controller/engine_state.py): reading only, so every replica answers, leader or not.

The request (extenderv1.ExtenderPreemptionArgs) has no json tags: its keys are Go's field names
(`Pod`, `NodeNameToVictims`, `NodeNameToMetaVictims`, `Pods`, `NumPDBViolations`, `UID`), seen
so on kube-scheduler 1.36; the lower-camel spellings are read too. With `nodeCacheCapable: true`
victims come as UIDs (MetaVictims), else as whole pods; both are read. The answer uses Go's
names as well (encoding/json matches keys case-insensitively either way).

Two writes follow an answer, by the leader only and off the scheduler's path:
- when no node is kept and the pod carries status.nominatedNodeName, the nomination is cleared
  (not a gang member's: gang preemption wrote it)
  (uid precondition; gone or replaced pods are skipped), as kube-scheduler clears it when it
  finds no candidate at all (preemption.go Preempt: NominatingInfo with an empty node name).
  With an extender that drops every node, Preempt returns "no candidate node for preemption"
  without a NominatingInfo, so kube-scheduler would keep a stale nomination;
- a Warning Event `PreemptionBlocked` on the pod, once per pod and reason, saying why the
  policies kept no node: kube-scheduler's FailedScheduling says only that no candidate is left.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog

from controller.caches import Caches
from controller.engine_state import EngineState
from controller.events import EventRecorder
from controller.victims import NotLeader, VictimWriter
from priogate.kube.cache import Obj, WatchCache, chained
from priogate.kube.client import ApiClient
from priogate.preemption.extender import Shaped, Victims, shape
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.records import PodInfo
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.state import ClusterState
from priogate.preemption.unmodelled import engine_blind

log = structlog.get_logger("priogate.controller.extender")

PREEMPT_PATH = "/scheduler/preempt"
MAX_BODY = 64 << 20  # a request lists every candidate's victims: generous, but bounded
BLOCKED_REASON = "PreemptionBlocked"


class BadRequest(ValueError):
    """A request this endpoint cannot read: answered 400 with the message."""


def _field(obj: Mapping[str, Any], go: str) -> Any:
    """A key in Go's spelling ("NodeNameToMetaVictims") or its json-tag-like one
    ("nodeNameToMetaVictims", "uid" for "UID")."""
    if go in obj:
        return obj[go]
    lower = go[0].lower() + go[1:] if go != "UID" else "uid"
    return obj.get(lower)


@dataclass(frozen=True)
class Request:
    pod: Mapping[str, Any]
    candidates: dict[str, tuple[tuple[str, ...], int]]  # node -> (victim UIDs, PDB violations)
    names: dict[str, str]  # victim UID -> "namespace/name", when whole pods were sent
    meta: bool  # victims came as UIDs (nodeCacheCapable)


def parse_request(body: bytes) -> Request:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"request body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object (ExtenderPreemptionArgs)")
    pod = _field(data, "Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("Pod: expected a Pod object with metadata")
    meta = pod["metadata"]
    if not meta.get("name") or not isinstance(meta.get("name"), str):
        raise BadRequest("Pod.metadata.name is missing")
    by_uid = _field(data, "NodeNameToMetaVictims")
    whole = _field(data, "NodeNameToVictims")
    source, is_meta = (by_uid, True) if by_uid is not None else (whole, False)
    if source is None:
        source = {}
    if not isinstance(source, dict):
        raise BadRequest("NodeNameToMetaVictims / NodeNameToVictims: expected an object")
    candidates: dict[str, tuple[tuple[str, ...], int]] = {}
    names: dict[str, str] = {}
    for node, victims in source.items():
        if victims is None:
            victims = {}
        if not isinstance(victims, dict):
            raise BadRequest(f"victims of node {node!r}: expected an object")
        pods = _field(victims, "Pods") or []
        violations = _field(victims, "NumPDBViolations") or 0
        if not isinstance(pods, list) or not isinstance(violations, int) or isinstance(violations, bool):
            raise BadRequest(
                f"victims of node {node!r}: expected Pods (a list) and NumPDBViolations (a number)"
            )
        uids = []
        for item in pods:
            if not isinstance(item, dict):
                raise BadRequest(f"a victim on node {node!r} is not an object")
            if is_meta:
                uid = _field(item, "UID")
            else:
                victim_meta = item.get("metadata") or {}
                uid = victim_meta.get("uid")
                if isinstance(uid, str):
                    names[uid] = f"{victim_meta.get('namespace') or 'default'}/{victim_meta.get('name', '')}"
            if not isinstance(uid, str) or not uid:
                raise BadRequest(f"a victim on node {node!r} has no UID")
            uids.append(uid)
        candidates[str(node)] = (tuple(uids), violations)
    return Request(pod, candidates, names, is_meta)


def answer(shaped: Shaped, uid_of: Callable[[str], str | None], request: Request) -> dict[str, Any]:
    """extenderv1.ExtenderPreemptionResult: the nodes kept with their victims by UID. A node
    whose victims did not change answers exactly the UIDs it was sent; one with other victims
    is left out if a victim's UID is not known (kube-scheduler would refuse the answer)."""
    result: dict[str, Any] = {}
    for node, victims in shaped.nodes.items():
        if node not in shaped.reasons:
            uids, violations = request.candidates[node]
        else:
            found = [uid_of(k) for k in victims.pods]
            if not all(found):
                continue
            uids, violations = tuple(u for u in found if u), victims.pdb_violations
        result[node] = {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
    return {"NodeNameToMetaVictims": result}


class UidIndex:
    """Pod UID -> "namespace/name", kept from the pods cache's events (seeded on first use, as
    EngineState is: an event is stored in the cache before its callback runs)."""

    def __init__(self, pods: WatchCache) -> None:
        self.pods = pods
        self._lock = threading.Lock()
        self._keys: dict[str, str] | None = None

    @classmethod
    def attach(cls, pods: WatchCache) -> UidIndex:
        index = cls(pods)
        pods.on_event = chained(index.on_event, pods.on_event)
        return index

    def on_event(self, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        with self._lock:
            if self._keys is None or not uid:
                return
            if event_type == "DELETED":
                self._keys.pop(uid, None)
            else:
                self._keys[uid] = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"

    def get(self, uid: str) -> str | None:
        with self._lock:
            if self._keys is None:
                self._keys = {}
                for pod in self.pods.items():
                    meta = pod.get("metadata") or {}
                    if meta.get("uid"):
                        self._keys[meta["uid"]] = (
                            f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
                        )
            return self._keys.get(uid)


class PreemptExtender:
    def __init__(
        self,
        client: ApiClient,
        caches: Caches,
        engine: EngineState,
        events: EventRecorder,
        is_leader: Callable[[], bool],
        policy: PreemptionPolicy,
        *,
        uids: UidIndex | None = None,
        clock: Callable[[], float] = time.time,
        on_answer: Callable[[str, float], None] = lambda result, seconds: None,
    ) -> None:
        self.caches = caches
        self.engine = engine
        self.events = events
        self.is_leader = is_leader
        self.policy = policy
        self.uids = uids or UidIndex.attach(caches.pods)
        self.clock = clock
        self.on_answer = on_answer
        self.writer = VictimWriter(client, caches.pods.get, events, self._guard)
        # The writes after an answer (a nomination cleared, an Event) never delay the answer.
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="extender-writes")
        self._told: dict[str, str] = {}  # pod uid -> the last reason told in an Event
        self._told_lock = threading.Lock()

    def _guard(self) -> None:
        if not self.is_leader():
            raise NotLeader("not the leader: the extender only reads")

    def handle(self, body: bytes) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        try:
            request = parse_request(body)
        except BadRequest as e:
            self.on_answer("bad-request", time.perf_counter() - started)
            return 400, {"error": str(e)}
        shaped, to_uid, key = self.decide(request)
        result = "unchanged" if shaped.unchanged else ("dropped-all" if not shaped.nodes else "shaped")
        if not shaped.unchanged:
            log.info(
                "preemption candidates shaped",
                pod=key,
                kept={n: list(v.pods) for n, v in shaped.nodes.items()},
                reasons=shaped.reasons,
            )
        if not shaped.nodes and request.candidates:
            self.pool.submit(self._after_nothing_kept, request.pod, shaped)
        self.on_answer(result, time.perf_counter() - started)
        return 200, answer(shaped, lambda k: to_uid.get(k) or self._uid(k), request)

    def decide(self, request: Request) -> tuple[Shaped, dict[str, str], str]:
        meta = request.pod["metadata"]
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        to_key: dict[str, str] = {}
        for uids, _ in request.candidates.values():
            for uid in uids:
                found = request.names.get(uid) or self.uids.get(uid)
                # An unknown UID gets a key no pod has: its node is dropped (fail closed).
                to_key[uid] = found or f"unknown-uid/{uid}"
        candidates = {
            node: Victims(tuple(to_key[u] for u in uids), violations)
            for node, (uids, violations) in request.candidates.items()
        }
        to_uid = {k: u for u, k in to_key.items()}
        blind = self._blind(request.pod, key)

        def decide_on(state: ClusterState) -> Shaped:
            preemptor = state.pods.get(key) or self._parse(request.pod)
            return shape(preemptor, candidates, state, self.policy, self.clock(), blind)

        return self.engine.read(decide_on), to_uid, key

    def _uid(self, key: str) -> str | None:
        namespace, _, name = key.partition("/")
        return ((self.caches.pods.get(namespace, name) or {}).get("metadata") or {}).get("uid")

    def _parse(self, pod: Mapping[str, Any]) -> PodInfo:
        """The preemptor as the engine would see it, when its view does not hold it yet (its
        request is then unknown to the engine: only the hard rules apply)."""
        try:
            return Snapshot.from_objects(pods=[pod], priority_classes=self.caches.classes.items()).pods[0]
        except ValueError as e:
            raise BadRequest(f"Pod: {e}") from None

    def _blind(self, preemptor: Mapping[str, Any], preemptor_key: str) -> Callable[[str], str]:
        memo: dict[str, str] = {preemptor_key: engine_blind(preemptor)}

        def blind(key: str) -> str:
            if key not in memo:
                namespace, _, name = key.partition("/")
                pod = self.caches.pods.get(namespace, name)
                memo[key] = engine_blind(pod) if pod is not None else "not in priogate's cache"
            return memo[key]

        return blind

    def _after_nothing_kept(self, pod: Mapping[str, Any], shaped: Shaped) -> None:
        if not self.is_leader():
            return
        try:
            meta = pod.get("metadata") or {}
            current = self.caches.pods.get(meta.get("namespace") or "default", meta.get("name", ""))
            nominated = ((current or pod).get("status") or {}).get("nominatedNodeName")
            if nominated and not shaped.gang:
                # The request's uid: a pod replaced since under the same name is left alone.
                cleared = self.writer.clear_nomination(pod)
                log.info("stale nomination cleared", pod=meta.get("name"), node=nominated, cleared=cleared)
            if not shaped.waiting:  # the start delay, a gang's member: no block worth a Warning
                self._tell(current or pod, shaped)
        except NotLeader:
            return
        except Exception:
            log.exception("writes after a preemption answer failed")

    def _tell(self, pod: Mapping[str, Any], shaped: Shaped) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        reasons = sorted(set(shaped.reasons.values()))
        note = "priogate's preemption policies kept no candidate node: " + "; ".join(
            f"{', '.join(sorted(n for n, r in shaped.reasons.items() if r == why))}: {why}" for why in reasons
        )
        with self._told_lock:
            if self._told.get(uid) == note:
                return
            if len(self._told) > 10_000:
                self._told.clear()  # bounded: at worst an Event is repeated
            self._told[uid] = note
        self.events.emit(
            pod, "Pod", "v1", type_="Warning", reason=BLOCKED_REASON, action="Preempt", note=note[:1024]
        )
