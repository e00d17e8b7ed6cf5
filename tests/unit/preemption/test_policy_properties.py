"""Property tests of the optional policies on small random clusters (test_properties'
generator, plus PodGroups, owner/driver pods and DaemonSet preemptors).

- neutral policies take kube-scheduler's victims: the shaped path (shaped.py) with no PDB and
  one QoS class decides exactly as the default path, and so do victim classes without owner
  pods where no two pods of a node tie on priority and start time;
- gang-aware victims never leave a PodGroup with fewer than minMember placed, unless it goes
  whole; strict PDB mode never spends more than a PDB allows over a whole run; a DaemonSet
  pod's victims are on its node; victims are always below the preemptor and never protected.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.engine import simulate
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.state import occupies
from tests.builders import podgroup
from tests.unit.preemption.test_properties import clusters

GROUPS = ("g0", "g1")


@st.composite
def group_clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects = copy.deepcopy(draw(clusters()))
    for name in GROUPS:
        objects.append(podgroup(name, min_member=draw(st.integers(1, 3)), phase="Running"))
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    bound = [o for o in objects if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    for obj in bound:
        if draw(st.integers(0, 2)) == 0:
            obj["metadata"].setdefault("annotations", {})["scheduling.k8s.io/group-name"] = draw(
                st.sampled_from(GROUPS)
            )
        elif bound and draw(st.integers(0, 4)) == 0:
            driver = draw(st.sampled_from(bound))["metadata"]["name"]
            obj["metadata"]["ownerReferences"] = [
                {"kind": "Pod", "name": driver, "apiVersion": "v1", "uid": "u"}
            ]
    for obj in objects:
        if obj["kind"] == "Pod" and not obj["spec"].get("nodeName") and draw(st.integers(0, 3)) == 0:
            target = draw(st.sampled_from(nodes))
            obj["metadata"]["ownerReferences"] = [
                {"kind": "DaemonSet", "name": "ds", "apiVersion": "apps/v1", "uid": "u"}
            ]
            obj["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}
                        ]
                    }
                }
            }
    return objects


POLICIES = st.builds(
    PreemptionPolicy,
    opt_out_mode=st.sampled_from(["hard", "soft"]),
    gang_aware_victims=st.booleans(),
    victim_classes=st.booleans(),
    qos_order=st.booleans(),
    victim_selection=st.sampled_from(
        [
            ("kube-scheduler",),
            ("single",),
            ("multiple",),
            ("single", "multiple"),
            ("multiple", "kube-scheduler"),
        ]
    ),
    single_victim_deviation=st.sampled_from([0.0, 10.0, 50.0, 100.0]),
    max_victims=st.integers(0, 3),
    pdb_mode=st.sampled_from(["best-effort", "strict"]),
)


def decisions(objects: list[dict[str, Any]], policy: PreemptionPolicy) -> list[tuple]:
    result = simulate(build_snapshot(objects), policy=policy)
    return [(o.preemptor, o.status, o.node, [v.key for v in o.victims]) for o in result.outcomes]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["hard", "soft"]))
def test_neutral_policies_take_kube_schedulers_victims(objects: list[dict[str, Any]], mode: str) -> None:
    # no PDB: strict changes nothing; every pod Burstable (cpu requests only) and no owners
    objects = [o for o in objects if o["kind"] != "PodDisruptionBudget"]
    default = decisions(objects, PreemptionPolicy(opt_out_mode=mode))
    # Victim classes are not neutral even without owners: within a class they order victims of
    # equal priority and start time by request (YuniKorn's "resource wise"), where
    # kube-scheduler has no order (the engine's default takes the name).
    neutral = PreemptionPolicy(opt_out_mode=mode, pdb_mode="strict", qos_order=True)
    assert decisions(objects, neutral) == default
    if not _ties(objects):  # then they are (no owners here)
        classes = PreemptionPolicy(opt_out_mode=mode, pdb_mode="strict", qos_order=True, victim_classes=True)
        assert decisions(objects, classes) == default


def _ties(objects: list[dict[str, Any]]) -> bool:
    """Do two pods on one node share priority and start time?"""
    seen = set()
    for o in objects:
        if o["kind"] == "Pod" and o["spec"].get("nodeName"):
            key = (o["spec"]["nodeName"], o["spec"].get("priority"), (o.get("status") or {}).get("startTime"))
            if key in seen:
                return True
            seen.add(key)
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_clusters(), POLICIES)
def test_policy_invariants(objects: list[dict[str, Any]], policy: PreemptionPolicy) -> None:
    snapshot = build_snapshot(objects)
    pods = {p.key: p for p in snapshot.pods}
    infos = {n.name: n for n in snapshot.nodes}
    min_member = {g.key: g.min_member for g in snapshot.groups}
    # placed, not terminating pods, kept current as the run goes on
    placed = {key: p for key, p in pods.items() if occupies(p, infos) and not p.terminating}
    spent: dict[str, int] = {}
    for outcome in simulate(snapshot, policy=policy).outcomes:
        if outcome.status != "preempt" or outcome.preemptor.startswith("podgroup:"):
            for key in outcome.placements:
                placed[key] = pods[key]
            for victim in outcome.victims:
                placed.pop(victim.key, None)
            continue
        preemptor = pods[outcome.preemptor]
        for victim in outcome.victims:
            assert victim.priority < preemptor.priority and not victim.protected
            if policy.opt_out_mode == "hard":
                assert not victim.opted_out
            if preemptor.daemonset:
                assert victim.node_name == outcome.node
        if policy.gang_aware_victims:
            for group, need in min_member.items():
                members = [k for k, p in placed.items() if p.group == group]
                taken = [v for v in outcome.victims if v.group == group]
                if taken:
                    assert len(taken) == len(members) or len(members) - len(taken) >= need
        if policy.pdb_mode == "strict":
            for pdb in snapshot.pdbs:
                for victim in outcome.victims:
                    if (
                        pdb.selector is not None
                        and pdb.selector.matches(victim.labels)
                        and victim.name not in pdb.disrupted_pods
                    ):
                        spent[pdb.key] = spent.get(pdb.key, 0) + 1
                assert spent.get(pdb.key, 0) <= max(pdb.disruptions_allowed, 0)
        for victim in outcome.victims:
            placed.pop(victim.key, None)
        placed[outcome.preemptor] = preemptor


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_clusters(), POLICIES)
def test_bounded_search_agrees_with_exhaustive_evaluation(
    objects: list[dict[str, Any]], policy: PreemptionPolicy
) -> None:
    # --explain evaluates every candidate node; without it, lower bounds end the search early
    snapshot = build_snapshot(objects)
    exhaustive = simulate(snapshot, policy=policy, explain=True).outcomes
    bounded = simulate(snapshot, policy=policy).outcomes
    assert [(o.preemptor, o.status, o.node, o.victims) for o in exhaustive] == [
        (o.preemptor, o.status, o.node, o.victims) for o in bounded
    ]
