"""simulate -f: hypothetical objects added to the live snapshot, decided by the engine."""

from __future__ import annotations

import pytest

from kubectl_priogate.simulation import Cluster, UsageError, decide, hypothetical, render_table, report
from tests.builders import node, pod, podgroup, priority_class

NOW = "2026-01-01T01:00:00Z"
CLASSES = [priority_class("low", value=10), priority_class("high", value=1000)]


def full_cluster() -> Cluster:
    """Two 4-cpu nodes, each full with two low-priority pods."""
    pods = [
        pod(
            f"low-{n}-{i}",
            namespace="fill",
            cpu="2",
            node=f"n{n}",
            phase="Running",
            priority_class="low",
            started=i,
        )
        for n in range(2)
        for i in range(2)
    ]
    return Cluster(nodes=[node("n0"), node("n1")], pods=pods, priority_classes=CLASSES)


def add(objects, *, namespace="team", explicit=False, live=None):
    return hypothetical(
        objects, namespace=namespace, namespace_explicit=explicit, now=NOW, live=live or Cluster()
    )


@pytest.mark.parametrize(
    ("objects", "explicit", "live", "error"),
    [
        ([{"kind": "Service", "metadata": {"name": "s"}}], False, None, "not Service"),
        ([{"kind": "Pod", "metadata": {}}], False, None, "needs metadata.name"),
        (
            [pod("p", namespace="other")],
            True,
            None,
            'the namespace from the provided object "other" does not match the namespace "team"',
        ),
        (
            [pod("taken", namespace="team")],
            False,
            Cluster(pods=[pod("taken", namespace="team")]),
            "already exists",
        ),
        ([podgroup("g", namespace="team")] * 2, False, None, "already exists"),
    ],
)
def test_hypothetical_refuses(objects, explicit, live, error):
    with pytest.raises(UsageError, match=error):
        add(objects, explicit=explicit, live=live)


def test_hypothetical_objects_are_new_and_pending():
    given = [
        pod(None, namespace=None, generate_name="job-", node=None, phase="Running"),
        pod("named", namespace="elsewhere"),
        podgroup("g", namespace=None),
        podgroup("done", namespace=None, phase="Running"),
    ]
    extra = add(given)
    generated, named = extra.pods
    assert generated["metadata"]["name"] == "job-hypothetical"
    assert generated["metadata"]["namespace"] == "team", "the -n namespace (or the context's)"
    assert generated["status"] == {"phase": "Pending"}
    assert named["metadata"]["namespace"] == "elsewhere", "an object's own namespace wins without -n"
    assert {p["metadata"]["creationTimestamp"] for p in extra.pods} == {NOW}
    assert [g["status"]["phase"] for g in extra.podgroups] == ["Inqueue", "Running"]
    assert extra.preemptors == (
        "team/job-hypothetical",
        "elsewhere/named",
        "podgroup:team/g",
        "podgroup:team/done",
    )
    assert given[0]["metadata"].get("namespace") is None, "the caller's objects are not changed"


def test_a_high_priority_pod_on_a_full_cluster_names_its_victims():
    live = full_cluster()
    extra = add([pod("urgent", namespace=None, cpu="2", priority_class="high", created=None)], live=live)
    data = report(decide(live, extra), extra, explain=False)
    (decision,) = data["decisions"]
    assert decision["preemptor"] == "team/urgent"
    assert len(decision["victims"]) == 1 and decision["victims"][0].startswith("fill/low-")
    assert data["hypothetical"] == [{"preemptor": "team/urgent", "status": "preempt"}]
    text = render_table(data)
    assert text.splitlines()[0].split() == ["PREEMPTOR", "DECISION", "NODE", "VICTIMS", "REASON"]
    assert "team/urgent (new)   preempt" in text


def test_a_pod_that_fits_and_one_of_no_higher_priority():
    live = full_cluster()
    live.nodes.append(node("n2"))
    extra = add([pod("small", namespace=None, cpu="1", priority_class="high", created=None)], live=live)
    data = report(decide(live, extra), extra, explain=False)
    assert data["decisions"] == []
    assert data["hypothetical"] == [{"preemptor": "team/small", "status": "fits"}]
    assert "fits without preemption" in render_table(data)


def test_a_hypothetical_gang_preempts_for_all_its_members():
    live = full_cluster()
    objects = [podgroup("gang", namespace=None, min_member=2, priority_class="high", created=None)] + [
        pod(f"m{i}", namespace=None, cpu="2", group="gang", priority_class="high", created=None)
        for i in range(2)
    ]
    extra = add(objects, live=live)
    data = report(decide(live, extra, explain=True), extra, explain=True)
    (decision,) = data["decisions"]
    assert decision["preemptor"] == "podgroup:team/gang"
    assert set(decision["placements"]) == {"team/m0", "team/m1"}
    assert len(decision["victims"]) == 2
    statuses = {h["preemptor"]: h["status"] for h in data["hypothetical"]}
    assert statuses == {"team/m0": "member", "team/m1": "member", "podgroup:team/gang": "preempt"}
    assert "nodes" in decision, "--explain keeps the engine's per-node reasons"


def test_no_preemptor_at_all():
    data = report(decide(Cluster(nodes=[node("n0")])), None, explain=False)
    assert render_table(data).startswith("No preemption needed")
