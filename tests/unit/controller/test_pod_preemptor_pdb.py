"""controller/pod_preemptor.py under --pdb-mode strict when only PDB-violating victims remain:
the pod stays pending and is told why in one Warning Event (PreemptionBlocked, the engine's
reason), not one per sweep; a new reason is told again, and once the PDB allows, it preempts.

With kube-scheduler's DefaultPreemption disabled (the preemptor mode) the scheduler's own
FailedScheduling message says nothing about preemption, so without this Event the pending pod
would carry no reason at all (tests/e2e/test_preemption_policies.py shows it live)."""

from __future__ import annotations

import copy

from controller.pod_preemptor import PodPreemptor
from priogate.kube.cache import WatchCache
from priogate.preemption.outcome import PDB_STRICT_REASON
from priogate.preemption.policy import PreemptionPolicy
from tests.builders import pdb
from tests.unit.gang_cluster import NS
from tests.unit.pod_cluster import Cluster, cluster, pending, running

STRICT = PreemptionPolicy(pdb_mode="strict")


def guarded(allowed: int) -> Cluster:
    victim = running("v", 1, cpu="4")
    victim["metadata"]["labels"] = {"app": "guarded"}
    c = cluster(victim, pending("hi", 10))
    c.caches.pdbs = WatchCache.static(
        "pdbs", [pdb("guard", match_labels={"app": "guarded"}, allowed=allowed)]
    )
    return c


def blocked(c: Cluster) -> list[dict]:
    return [e for e in c.events() if e["reason"] == "PreemptionBlocked"]


def test_a_pod_only_pdb_violations_would_make_room_for_is_told_why_once():
    c = guarded(allowed=0)
    preemptor = c.preemptor(policy=STRICT)
    assert preemptor.sweep().result == "idle"
    (event,) = blocked(c)
    assert event["type"] == "Warning" and event["action"] == "Preempt"
    assert event["regarding"]["name"] == "hi" and event["regarding"]["uid"] == "uid-hi"
    assert event["note"].startswith(PDB_STRICT_REASON), event["note"]
    # Every sweep decides again; the same reason is not told twice.
    assert preemptor.sweep().result == "idle"
    assert len(blocked(c)) == 1
    assert not [w for w in c.client.writes if w.method in ("DELETE", "POST") and "/eviction" in w.path]


def test_the_same_pod_is_told_again_once_it_is_a_new_pod_and_nothing_once_the_pdb_allows():
    c = guarded(allowed=0)
    preemptor = c.preemptor(policy=STRICT)
    preemptor.sweep()
    assert len(blocked(c)) == 1
    # Replaced by a pod of the same name (another uid): a pod of its own, told once more.
    replaced = copy.deepcopy(c.caches.pods.get(NS, "hi"))
    assert replaced is not None
    replaced["metadata"]["uid"] = "uid-hi-2"
    c.caches.pods.apply_event("MODIFIED", replaced)
    preemptor.sweep()
    assert [e["regarding"]["uid"] for e in blocked(c)] == ["uid-hi", "uid-hi-2"]
    assert set(preemptor.told) == {"uid-hi-2"}  # the first pod's entry is gone with it

    allowing = guarded(allowed=1)
    assert allowing.preemptor(policy=STRICT).sweep().result == "preempted"
    assert not blocked(allowing)


def test_best_effort_mode_never_tells_a_pdb_block():
    c = guarded(allowed=0)
    # kube-scheduler's behaviour: the PDB-violating victim is taken when nothing else works.
    assert c.preemptor(policy=PreemptionPolicy()).sweep().result == "preempted"
    assert not blocked(c)


def test_the_told_reason_is_the_engines():
    c = guarded(allowed=0)
    preemptor: PodPreemptor = c.preemptor(policy=STRICT)
    outcome = preemptor.engine.decide_pod(f"{NS}/hi", policy=STRICT, now=0.0)
    assert outcome.status == "unresolved"
    preemptor.sweep()
    (event,) = blocked(c)
    assert event["note"] == outcome.reason
