"""The reservations table: hard, used, reserved, reserved but unused, free, per quota."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest

from kubectl_priogate import reservations
from kubectl_priogate.reservations import NO_QUOTA, NamespaceReport, namespace_report, render_table, to_json
from priogate.ledger.codec import CONFIGMAP_MAX_BYTES
from priogate.ledger.model import Entry
from tests.builders import pod, podgroup, resource_quota

NOW = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
LONG_AGO = "2026-01-01T00:00:00Z"
JUST_NOW = "2026-01-01T11:59:58Z"  # inside the in-flight bound


def entry(
    group: str, min_resources: dict[str, str], *, min_member: int = 1, cls: str = "", at: str = LONG_AGO
):
    return Entry(group, f"uid-{group}", min_resources, min_member, cls, at)


def ledger(*entries: Entry) -> dict[str, Entry]:
    return {e.key: e for e in entries}


def member(name: str, group: str, cpu: str, *, phase: str | None = None):
    return pod(name, cpu=cpu, group=group, node="n1", phase=phase)


def row(report, quota: str, resource: str):
    (found,) = [r for r in report.rows if (r.quota, r.resource) == (quota, resource)]
    return found


F = Fraction


@pytest.mark.parametrize(
    ("case", "quotas", "entries", "groups", "pods", "expect"),
    [
        (
            "two groups, one member running: unused is what the members do not use yet",
            [resource_quota("q", hard={"cpu": "10", "pods": "10"}, used={"cpu": "3", "pods": "2"})],
            ledger(entry("train", {"cpu": "4"}, min_member=2), entry("eval", {"cpu": "2"})),
            [podgroup("train", phase="Inqueue"), podgroup("eval", phase="Inqueue")],
            [member("train-0", "train", "1"), pod("other", cpu="2", node="n1")],
            {
                ("q", "cpu"): (F(10), F(3), F(6), F(5), F(2), (("eval", F(2)), ("train", F(4)))),
                ("q", "pods"): (F(10), F(2), F(3), F(2), F(6), (("eval", F(1)), ("train", F(2)))),
            },
        ),
        (
            "a member using more than its group reserved leaves nothing unused, never less than 0",
            [resource_quota("q", hard={"cpu": "10"}, used={"cpu": "5"})],
            ledger(entry("g", {"cpu": "2"})),
            [podgroup("g", phase="Running")],
            [member("g-0", "g", "5")],
            {("q", "cpu"): (F(10), F(5), F(2), F(0), F(5), (("g", F(2)),))},
        ),
        (
            "finished members use nothing (the quota controller stops counting them too)",
            [resource_quota("q", hard={"cpu": "10"}, used={"cpu": "0"})],
            ledger(entry("g", {"cpu": "4"})),
            [podgroup("g", phase="Inqueue")],
            [member("g-0", "g", "4", phase="Succeeded")],
            {("q", "cpu"): (F(10), F(0), F(4), F(4), F(6), (("g", F(4)),))},
        ),
        (
            "an entry whose group is gone past the grace period does not count; one just admitted does",
            [resource_quota("q", hard={"cpu": "10"}, used={"cpu": "0"})],
            ledger(entry("gone", {"cpu": "4"}), entry("fresh", {"cpu": "1"}, at=JUST_NOW)),
            [],
            [],
            {("q", "cpu"): (F(10), F(0), F(1), F(1), F(9), (("fresh", F(1)),))},
        ),
        (
            "a quota scoped to a PriorityClass counts only the groups of that class",
            [
                resource_quota(
                    "gold",
                    hard={"cpu": "8"},
                    used={"cpu": "0"},
                    scope_selector={
                        "matchExpressions": [
                            {"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}
                        ]
                    },
                ),
                resource_quota("all", hard={"cpu": "20"}, used={"cpu": "0"}),
            ],
            ledger(entry("a", {"cpu": "3"}, cls="gold"), entry("b", {"cpu": "5"})),
            [podgroup("a", phase="Inqueue"), podgroup("b", phase="Inqueue")],
            [],
            {
                ("gold", "cpu"): (F(8), F(0), F(3), F(3), F(5), (("a", F(3)),)),
                ("all", "cpu"): (F(20), F(0), F(8), F(8), F(12), (("a", F(3)), ("b", F(5)))),
            },
        ),
        (
            "a quota the quota controller has not counted yet: used and free unknown",
            [{**resource_quota("q", hard={"cpu": "10"}), "status": {}}],
            ledger(entry("g", {"cpu": "4"})),
            [podgroup("g", phase="Inqueue")],
            [],
            {("q", "cpu"): (F(10), None, F(4), F(4), None, (("g", F(4)),))},
        ),
        (
            "no quota: the reservations are shown with nothing to compare them with",
            [],
            ledger(entry("g", {"cpu": "4"}, min_member=2)),
            [podgroup("g", phase="Inqueue")],
            [],
            {
                (NO_QUOTA, "cpu"): (None, None, F(4), F(4), None, (("g", F(4)),)),
                (NO_QUOTA, "pods"): (None, None, F(2), F(2), None, (("g", F(2)),)),
            },
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_namespace_report(case, quotas, entries, groups, pods, expect):
    report = namespace_report("default", quotas, entries, groups, pods, NOW)
    got = {
        (r.quota, r.resource): (r.hard, r.used, r.reserved, r.unconsumed, r.free, r.groups)
        for r in report.rows
        if (r.quota, r.resource) in expect
    }
    assert got == expect, case


def test_stale_entries_are_named_and_holds_carry_the_group_phase():
    report = namespace_report(
        "default",
        [],
        ledger(
            entry("gone", {"cpu": "1"}),
            entry("fresh", {"cpu": "1"}, at=JUST_NOW),
            entry("live", {"cpu": "1"}),
        ),
        [podgroup("live")],  # stored, not reconciled yet: no status
        [],
        NOW,
    )
    assert report.stale == ("gone",)
    assert {h.group: h.phase for h in report.holds} == {"fresh": "", "live": "Pending"}


def team_a_report(ledger_bytes: int | None = None) -> NamespaceReport:
    """A namespace with one quota and one group holding 4 of its 10 cpu."""
    return namespace_report(
        "team-a",
        [resource_quota("compute", hard={"cpu": "10"}, used={"cpu": "2"})],
        ledger(entry("train", {"cpu": "4"})),
        [podgroup("train", namespace="team-a", phase="Inqueue")],
        [],
        NOW,
        ledger_bytes,
    )


def test_table_and_json():
    report = team_a_report()
    assert render_table([report], all_namespaces=False) == (
        "QUOTA     RESOURCE   HARD   USED   RESERVED   RESERVED-UNUSED   FREE   PODGROUPS\n"
        "compute   cpu        10     2      4          4                 4      train=4\n"
    )
    assert render_table([report], all_namespaces=True).startswith("NAMESPACE   QUOTA")
    data = to_json([report])
    (ns,) = data["namespaces"]
    assert ns["namespace"] == "team-a"
    assert ns["quotas"] == [
        {
            "name": "compute",
            "resources": {
                "cpu": {
                    "hard": "10",
                    "used": "2",
                    "reserved": "4",
                    "reservedUnused": "4",
                    "free": "4",
                    "podGroups": {"train": "4"},
                }
            },
        }
    ]
    assert ns["podGroups"][0]["reserved"] == {"count/pods": "1", "cpu": "4", "pods": "1", "requests.cpu": "4"}
    assert ns["podGroups"][0]["phase"] == "Inqueue"


@pytest.mark.parametrize(
    ("ledger_bytes", "note"),
    [
        (None, None),  # a user who may not read the ledger: nothing to say
        (40 * 1024, None),
        (CONFIGMAP_MAX_BYTES // 2 - 1, None),
        (CONFIGMAP_MAX_BYTES // 2, "is 50% full (512 KiB of 1024 KiB)"),
        (CONFIGMAP_MAX_BYTES - 1024, "is 100% full (1023 KiB of 1024 KiB)"),
    ],
)
def test_a_filling_ledger_is_named_under_the_table_and_its_size_is_in_json(ledger_bytes, note):
    report = team_a_report(ledger_bytes)
    text = render_table([report], all_namespaces=False)
    assert text.startswith("QUOTA ")
    if note is None:
        assert "ledger" not in text
    else:
        assert f"The ledger of namespace team-a {note}" in text
        assert "new PodGroups with minResources are refused" in text
    (ns,) = to_json([report])["namespaces"]
    assert ns["ledger"] == (
        None if ledger_bytes is None else {"bytes": ledger_bytes, "limitBytes": CONFIGMAP_MAX_BYTES}
    )


def test_consumed_by_group_counts_unfinished_members_only():
    pods = [
        member("a", "g", "1"),
        member("b", "g", "2", phase="Failed"),
        pod("loner", cpu="5"),
    ]
    assert reservations.consumed_by_group(pods) == {
        "g": {"cpu": F(1), "requests.cpu": F(1), "pods": F(1), "count/pods": F(1)}
    }
