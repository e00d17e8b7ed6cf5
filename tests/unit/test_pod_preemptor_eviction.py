"""controller/pod_preemptor.py through the Eviction API (a PDB refusal reported, strict PDB mode
leaving the pod pending with a Warning), and its decision being the one `python -m controller
simulate` prints for the same objects (the cluster of tests/unit/pod_cluster.py)."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from controller import simulate
from controller.caches import Caches
from controller.engine_state import EngineState
from controller.events import EventRecorder
from controller.victims import Preemptor, Taken, VictimWriter
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.preemption.engine import simulate as engine_simulate
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption_record import Victim
from tests.builders import node, priority_class
from tests.unit.gang_cluster import EVENTS_PATH, NS, pod_path
from tests.unit.pod_cluster import cluster, pending, running

# ---- the Eviction API path ----------------------------------------------------------------------


def test_eviction_posts_a_uid_preconditioned_eviction_and_reports_a_pdb_refusal():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    writer = VictimWriter(c.client, c.caches.pods.get, EventRecorder(c.client, "t"), lambda: None)
    by = Preemptor("Pod", "v1", c.client.objects[pod_path("hi")], "Preempted by pod uid-hi on node n1")
    assert writer.evict(Victim(NS, "v", "uid-v", "n1"), by) is Taken.DELETED
    (post,) = [w for w in c.client.writes if w.path == pod_path("v") + "/eviction"]
    assert post.method == "POST"
    assert post.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "v", "namespace": NS},
        "deleteOptions": {"preconditions": {"uid": "uid-v"}},
    }
    original = c.client.request

    def refuse(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if path.endswith("/eviction"):
            raise ApiError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        return original(method, path, **kw)

    c.client.request = refuse  # type: ignore[method-assign]
    assert writer.evict(Victim(NS, "v", "uid-v", "n1"), by) is Taken.BLOCKED
    assert writer.evict(Victim(NS, "v", "uid-other", "n1"), by) is Taken.GONE  # not the cached pod


def test_strict_pdb_mode_evicts_and_a_refused_eviction_leaves_the_pod_pending_with_a_warning():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    strict = PreemptionPolicy(pdb_mode="strict")
    original = c.client.request
    evictions = []

    def refuse(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if path.endswith("/eviction"):
            evictions.append((method, path))
            raise ApiError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        return original(method, path, **kw)

    c.client.request = refuse  # type: ignore[method-assign]
    assert c.preemptor(policy=strict).sweep().result == "preempted"
    assert evictions == [("POST", pod_path("v") + "/eviction")]
    paths = [(w.method, w.path) for w in c.client.writes if w.path != EVENTS_PATH]
    assert ("DELETE", pod_path("v")) not in paths  # never a plain delete in strict mode
    assert pod_path("v") in c.client.objects
    (warning,) = [e for e in c.events() if e["reason"] == "PreemptionBlocked"]
    assert warning["type"] == "Warning" and "default/v" in warning["note"]


# ---- simulate parity ----------------------------------------------------------------------------


def _parity_objects() -> list[dict]:
    objs: list[dict] = [node("n1", cpu="4"), node("n2", cpu="4"), priority_class("high", value=100)]
    objs += [running("a1", 1, start=0), running("a2", 3, start=1)]
    objs += [running("b1", 2, node_name="n2", start=2), running("b2", 2, node_name="n2", start=3)]
    opted = running("b3", 0, cpu="0", node_name="n2")
    opted["metadata"]["labels"] = {record.OPT_OUT_LABEL: "false"}
    objs += [opted, pending("hi", 10)]
    return objs


def test_the_live_decision_is_what_simulate_prints_for_the_same_objects(tmp_path):
    objs = _parity_objects()
    kinds: dict[str, list[dict]] = {"Node": [], "Pod": [], "PriorityClass": []}
    for o in objs:
        kinds[o["kind"]].append(o)
    caches = Caches(
        podgroups=WatchCache.static("podgroups", []),
        pods=WatchCache.static("pods", kinds["Pod"]),
        quotas=WatchCache.static("quotas", []),
        nodes=WatchCache.static("nodes", kinds["Node"]),
        ledgers=WatchCache.static("ledgers", []),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", kinds["PriorityClass"]),
    )
    live = EngineState(caches).decide_pod(f"{NS}/hi")
    (offline,) = [o for o in engine_simulate(build_snapshot(objs)).outcomes if o.preemptor == f"{NS}/hi"]
    assert live == offline
    assert live.status == "preempt"

    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    out = io.StringIO()
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    assert simulate.run(parser.parse_args([str(snapshot)]), io.StringIO(), out, io.StringIO()) == 0
    (printed,) = json.loads(out.getvalue())["decisions"]
    assert printed["preemptor"] == f"{NS}/hi"
    assert printed["nominatedNode"] == live.node
    assert printed["victims"] == [v.key for v in live.victims]
