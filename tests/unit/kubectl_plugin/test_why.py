"""`why`: a verdict from conditions, Events and preemption records; tables of cases."""

from __future__ import annotations

import pytest
import yaml

from kubectl_priogate.output import render
from kubectl_priogate.why import event_lines, parse_target, pod_report, podgroup_report, records_naming
from kubectl_priogate.why_report import render_text, to_json
from priogate.ledger.model import Entry
from priogate.preemption_record import RecordedDecision, Victim
from tests.builders import pod, podgroup

UNSCHEDULABLE_MSG = "0/3 nodes are available: 3 Insufficient cpu."


def with_conditions(obj, *conditions):
    obj.setdefault("status", {})["conditions"] = list(conditions)
    return obj


def cond(type_, status, reason="", message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


def pod_uid(obj, uid="uid-p"):
    obj["metadata"]["uid"] = uid
    return obj


def event(
    reason, note, *, type_="Normal", at="2026-01-01T00:00:10Z", source="default-scheduler", uid="", kind="Pod"
):
    return {
        "type": type_,
        "reason": reason,
        "note": note,
        "eventTime": at,
        "reportingController": source,
        "regarding": {"kind": kind, "name": "p", "uid": uid},
    }


def decision(*victims: tuple[str, str, str], applied=True, stopped="", at=1767225600.0, id_="d1"):
    return RecordedDecision(
        id_,
        at,
        tuple(Victim(ns, name, uid, "n1") for ns, name, uid in victims),
        {"m0": "n1"},
        "gang",
        applied,
        stopped,
    )


def group_with(record: RecordedDecision, name="gang", namespace="team"):
    g = podgroup(name, namespace=namespace, phase="Inqueue")
    g["metadata"]["annotations"] = {"priogate.io/preemption": record.to_annotation()}
    return g


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("web", ("Pod", "web")),
        ("pod/web", ("Pod", "web")),
        ("po/web", ("Pod", "web")),
        ("podgroup/train", ("PodGroup", "train")),
        ("pg/train", ("PodGroup", "train")),
        ("podgroups.scheduling.volcano.sh/train", ("PodGroup", "train")),
    ],
)
def test_parse_target(target, expected):
    assert parse_target(target) == expected


@pytest.mark.parametrize("target", ["deploy/web", "pod/", "pod/a/b"])
def test_parse_target_refuses(target):
    with pytest.raises(ValueError):
        parse_target(target)


PENDING = with_conditions(pod("p"), cond("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_MSG))


def priogate_gated(obj: dict) -> dict:
    obj["spec"]["schedulingGates"] = [{"name": "priogate.io/podgroup"}]
    return obj


@pytest.mark.parametrize(
    ("case", "obj", "events", "records", "group", "state", "says"),
    [
        ("unschedulable", PENDING, [], [], None, "Pending", f"unschedulable: {UNSCHEDULABLE_MSG}"),
        (
            "nominated while victims leave",
            {**PENDING, "status": {**PENDING["status"], "nominatedNodeName": "n1"}},
            [],
            [],
            None,
            "Pending",
            "nominated to node n1",
        ),
        ("not tried yet", pod("p"), [], [], None, "Pending", "not tried by the scheduler yet"),
        ("gated", pod("p", gated=True), [], [], None, "Pending", "scheduling gates example.com/gate"),
        (
            "held by priogate's gate for a Pending group",
            priogate_gated(pod("p", group="g")),
            [],
            [],
            with_conditions(
                podgroup("g", phase="Pending"), cond("Unschedulable", "True", "NotEnoughResources", "quota")
            ),
            "Pending",
            "priogate.io/podgroup holds it until its PodGroup default/g is Inqueue (now Pending: "
            "NotEnoughResources: quota)",
        ),
        (
            "held by priogate's gate for a group not there",
            priogate_gated(pod("p", group="typo")),
            [],
            [],
            None,
            "Pending",
            "until its PodGroup default/typo exists and is Inqueue",
        ),
        (
            "member of a Pending group",
            pod("p", group="g", phase="Pending"),
            [],
            [],
            with_conditions(
                podgroup("g", phase="Pending"), cond("Unschedulable", "True", "NotEnoughResources", "quota")
            ),
            "Pending",
            "its PodGroup g is Pending",
        ),
        (
            "running",
            pod("p", node="n1"),
            [],
            [],
            None,
            "Running",
            "scheduled to node n1; nothing holds it back",
        ),
        (
            "preempted by priogate, still terminating",
            with_conditions(
                pod_uid(pod("p", node="n1", deleting=True)),
                cond(
                    "DisruptionTarget",
                    "True",
                    "PreemptionByPriogate",
                    "priogate: preempted for PodGroup team/gang",
                ),
            ),
            [],
            [],
            None,
            "Preempted",
            "preempted by priogate: priogate: preempted for PodGroup team/gang; terminating",
        ),
        (
            "preempted by kube-scheduler: its condition",
            pod("p", node="n1", preempted=True),
            [],
            [],
            None,
            "Preempted",
            "preempted by kube-scheduler",
        ),
        (
            "gone: the scheduler's Preempted event remembers it",
            None,
            [event("Preempted", "Preempted by pod u1 on node n1")],
            [],
            None,
            "Preempted",
            "preempted by kube-scheduler: Preempted by pod u1 on node n1; the pod is gone",
        ),
        (
            "gone: priogate's record remembers it",
            None,
            [],
            [("team/gang", decision(("default", "p", "uid-p")))],
            None,
            "Preempted",
            "preempted by priogate to make room for PodGroup team/gang (decision d1, applied); "
            "the pod is gone",
        ),
        (
            "gone, only other events",
            None,
            [event("Scheduled", "assigned")],
            [],
            None,
            "Gone",
            "no longer exists",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_pod_report(case, obj, events, records, group, state, says):
    report = pod_report("default", "p", obj, events, records, group)
    assert report is not None
    assert report.state == state, case
    assert says in report.summary, (case, report.summary)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_pod_report_renders_in_every_format(fmt):
    report = pod_report("default", "p", PENDING, [event("FailedScheduling", UNSCHEDULABLE_MSG)], [])
    assert report is not None and type(report.state) is str
    assert (
        "state: Pending" in render(to_json(report), "yaml") if fmt == "yaml" else render(to_json(report), fmt)
    )


def test_a_pod_nobody_remembers_is_not_found():
    assert pod_report("default", "p", None, [], []) is None


def test_records_naming_matches_the_victim_by_name_and_uid():
    groups = [
        group_with(decision(("default", "p", "uid-old"), id_="old")),
        group_with(decision(("default", "p", "uid-p"), at=1767225700.0, id_="new"), name="other"),
        group_with(decision(("default", "q", "uid-q"), id_="unrelated"), name="third"),
        {
            **podgroup("broken"),
            "metadata": {"name": "broken", "annotations": {"priogate.io/preemption": "{"}},
        },
    ]
    assert [d.id for _, d in records_naming(groups, "default", "p", None)] == ["old", "new"]
    assert [(k, d.id) for k, d in records_naming(groups, "default", "p", "uid-p")] == [("team/other", "new")]


def test_event_lines_newest_last_other_objects_left_out():
    lines = event_lines(
        [
            event("B", "second", at="2026-01-01T00:00:20Z", uid="uid-p"),
            event("A", "first", at="2026-01-01T00:00:10Z"),
            event("X", "earlier pod of the name", uid="uid-old"),
            {
                **event("S", "series", at=""),
                "series": {"count": 4, "lastObservedTime": "2026-01-01T00:00:30Z"},
            },
        ],
        uid="uid-p",
    )
    assert [(e.reason, e.count) for e in lines] == [("A", 1), ("B", 1), ("S", 4)]


GROUP_PENDING = with_conditions(
    podgroup("train", namespace="team", phase="Pending", min_member=2, min_resources={"cpu": "4"}),
    cond("Scheduled", "False", "NotEnoughMembersScheduled", "0/2 members scheduled"),
    cond("Unschedulable", "True", "NotEnoughResources", "quota compute: cpu over"),
)


@pytest.mark.parametrize(
    ("case", "group", "members", "state", "says"),
    [
        (
            "pending",
            GROUP_PENDING,
            [],
            "Pending",
            "not admitted to its queue: NotEnoughResources: quota compute: cpu over",
        ),
        ("not reconciled yet", podgroup("train", namespace="team"), [], "<none>", "not reconciled"),
        (
            "inqueue with a member the scheduler cannot place, and a decision being applied",
            group_with(decision(("fill", "low-0", "u"), applied=False), name="train"),
            [
                with_conditions(
                    pod("m0", namespace="team", group="train"),
                    cond("PodScheduled", "False", "Unschedulable", "no room"),
                )
            ],
            "Inqueue",
            "1 member(s) unschedulable: Unschedulable: no room; "
            "gang preemption d1 recorded, being applied (1 victim(s))",
        ),
        (
            "a stopped decision",
            group_with(decision(("fill", "low-0", "u"), stopped="victim changed"), name="train"),
            [],
            "Inqueue",
            "last gang preemption d1 stopped: victim changed",
        ),
        (
            "running",
            with_conditions(
                podgroup("train", namespace="team", phase="Running", min_member=1),
                cond("Scheduled", "True", "MinMemberScheduled", "1/1 members scheduled"),
            ),
            [pod("m0", namespace="team", group="train", node="n1")],
            "Running",
            "running: 1/1 members scheduled",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_podgroup_report(case, group, members, state, says):
    report = podgroup_report(group, members, [], {})
    assert report.state == state, case
    assert says in report.summary, (case, report.summary)


def test_podgroup_text_and_json():
    ledger = {"uid-train": Entry("train", "uid-train", {"cpu": "4"}, 2, "", "2026-01-01T00:00:00Z")}
    members = [
        with_conditions(
            pod("m0", namespace="team", group="train"),
            cond("PodScheduled", "False", "Unschedulable", "no room"),
        )
    ]
    events = [
        event(
            "Pending",
            "phase Inqueue -> Pending",
            type_="Warning",
            source="priogate.io/controller",
            kind="PodGroup",
        )
    ]
    report = podgroup_report(GROUP_PENDING, members, events, ledger)
    text = render_text(report, now=1767225600.0 + 70)
    assert text.startswith(
        "PodGroup:       team/train\nState:          Pending\nWhy:            not admitted"
    )
    assert "Reservation:    holds minResources cpu=4, minMember 2" in text
    assert "Unschedulable=True (NotEnoughResources): quota compute: cpu over" in text
    assert "  NAME   PHASE     NODE     NOMINATED   SCHEDULING" in text
    assert "  Warning   Pending   60s   priogate.io/controller   phase Inqueue -> Pending" in text
    data = to_json(report)
    assert data["state"] == "Pending" and data["members"][0]["name"] == "m0"
    assert data["events"][0]["lastSeen"] == "2026-01-01T00:00:10Z"
    assert {
        "name": "Reservation",
        "value": "holds minResources cpu=4, minMember 2 (admitted 2026-01-01T00:00:00Z)",
    } in data["details"]
    assert "holds none" in render_text(podgroup_report(GROUP_PENDING, [], [], {}), now=0)
    assert "no ledger" in render_text(podgroup_report(GROUP_PENDING, [], [], None), now=0)


FORGED = "cpu\n\x1b[2J\x1b[H State: Running\u202e"
FORGED_SHOWN = "cpu\\n\\x1b[2J\\x1b[H State: Running\\u202e"


def test_tenant_text_is_shown_escaped_in_text_and_kept_exact_in_json_and_yaml():
    """A minResources name with a forged line reaches the report through the condition, the
    ledger entry, an Event and a member's condition: text shows it escaped, one line each;
    JSON and YAML carry it exactly, escaped by their encoders."""
    group = with_conditions(
        podgroup("train", namespace="team", phase="Pending", min_member=2),
        cond("Unschedulable", "True", "NotEnoughResources", f"minResources {FORGED}=1 exceed"),
    )
    group["metadata"]["uid"] = "uid-train"
    ledger = {"uid-train": Entry("train", "uid-train", {FORGED: "1"}, 2, "", "2026-01-01T00:00:00Z")}
    member = with_conditions(
        pod("m0", namespace="team", group="train"), cond("PodScheduled", "False", "Unschedulable", FORGED)
    )
    events = [event("Pending", f"phase none -> Pending: {FORGED}", kind="PodGroup")]
    report = podgroup_report(group, [member], events, ledger)
    text = render_text(report, now=1767225600.0)
    assert not set(text) & {"\x1b", "\r", "\u202e"}, text
    forged_lines = [line for line in text.splitlines() if line.lstrip().startswith("State:")]
    assert forged_lines == ["State:          Pending"], text
    assert (
        f"Why:            not admitted to its queue: NotEnoughResources: minResources {FORGED_SHOWN}=1"
        in text
    )
    assert f"Reservation:    holds minResources {FORGED_SHOWN}=1," in text
    assert text.count(FORGED_SHOWN) == 5  # why, reservation, condition, member, event
    for fmt in ("json", "yaml"):
        out = render(to_json(report), fmt)
        assert not set(out) & {"\x1b", "\r", "\u202e"}, fmt
        assert yaml.safe_load(out)["events"][0]["note"] == f"phase none -> Pending: {FORGED}", fmt
