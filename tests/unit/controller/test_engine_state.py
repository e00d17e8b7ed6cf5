"""controller/engine_state.py: the live preemption state fed by the caches' events decides as a
snapshot rebuilt from the same caches would, including events that arrive before it is seeded."""

from __future__ import annotations

from controller.caches import Caches
from controller.engine_state import EngineState
from priogate.kube.cache import WatchCache
from priogate.preemption.engine import decide_for_group
from priogate.preemption.snapshot import Snapshot
from tests.builders import node, pdb, pod, podgroup


def _caches() -> Caches:
    def cache(name: str, objects: list) -> WatchCache:
        return WatchCache.static(name, objects)

    return Caches(
        podgroups=cache("podgroups", [podgroup("job", min_member=2, phase="Inqueue")]),
        pods=cache(
            "pods",
            [
                pod("low-0", priority=1, cpu="3", node="n0", labels={"app": "a"}),
                pod("low-1", priority=2, cpu="3", node="n1", labels={"app": "b"}),
                pod("job-0", priority=10, cpu="2", group="job"),
                pod("job-1", priority=10, cpu="2", group="job"),
            ],
        ),
        quotas=cache("quotas", []),
        nodes=cache("nodes", [node("n0"), node("n1")]),
        ledgers=cache("ledgers", []),
        pdbs=cache("pdbs", []),
        classes=cache("classes", []),
    )


def _fresh(caches: Caches) -> Snapshot:
    return Snapshot.from_objects(
        nodes=caches.nodes.items(),
        pods=caches.pods.items(),
        podgroups=caches.podgroups.items(),
        pdbs=caches.pdbs.items(),
        priority_classes=caches.classes.items(),
    )


def test_events_before_and_after_seeding_reach_the_decision() -> None:
    caches = _caches()
    seen: list[str] = []
    caches.pods.on_event = lambda event_type, obj: seen.append(event_type)  # the controller's own
    engine = EngineState.attach(caches)
    caches.nodes.apply_event("ADDED", node("n2", cpu="1"))  # before seeding: read from the cache
    first = engine.decide("default/job")
    assert first == decide_for_group(_fresh(caches), "default/job")
    assert first.status == "preempt"
    caches.pods.apply_event("DELETED", pod("low-0", priority=1, cpu="3", node="n0"))
    caches.pdbs.apply_event("ADDED", pdb("keep-b", match_labels={"app": "b"}))
    after = engine.decide("default/job")
    assert after == decide_for_group(_fresh(caches), "default/job")
    assert seen == ["DELETED"]  # the chained callback kept the controller's


def test_a_malformed_object_is_left_out_not_fatal() -> None:
    caches = _caches()
    engine = EngineState.attach(caches)
    engine.decide("default/job")
    caches.pods.apply_event("ADDED", pod("broken", cpu="lots"))
    outcome = engine.decide("default/job")
    assert outcome.status == "preempt"


def test_a_relist_deletes_what_vanished_and_resyncs_the_rest() -> None:
    caches = _caches()
    engine = EngineState.attach(caches)
    engine.decide("default/job")
    kept = [p for p in caches.pods.items() if p["metadata"]["name"] != "low-1"]
    caches.pods.replace_all([*kept, pod("low-2", priority=3, cpu="3", node="n1")], "2")
    outcome = engine.decide("default/job")
    assert outcome == decide_for_group(_fresh(caches), "default/job")
    assert "default/low-1" not in {v.key for v in outcome.victims}


def test_an_unexpected_failure_reseeds_instead_of_stopping_the_watch() -> None:
    caches = _caches()
    engine = EngineState.attach(caches)
    engine.decide("default/job")
    assert engine._live is not None

    def broken(*args: object) -> bool:
        raise RuntimeError("a bug")

    engine._live.apply = broken  # type: ignore[method-assign]
    caches.nodes.apply_event("ADDED", node("n2", cpu="1"))  # does not raise into the watch
    assert engine._live is None
    assert engine.decide("default/job") == decide_for_group(_fresh(caches), "default/job")
