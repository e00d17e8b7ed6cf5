"""The enqueue policy: quota and preemption-aware capacity."""

from __future__ import annotations

from fractions import Fraction

from priogate.enqueue import BoundPod, GroupDemand, min_resources_of
from priogate.enqueue_index import verdict
from tests.builders import resource_quota


def group(
    key="ns/g", cpu="4", priority=100, phase="Pending", consumed="0", preempts=True, ns="ns"
) -> GroupDemand:
    # consumed: requests of bound members, which (being created) are also charged to the quota
    return GroupDemand(
        key=key,
        namespace=ns,
        priority_class="",
        priority=priority,
        preempts=preempts,
        phase=phase,
        min_member=2,
        min_resources=min_resources_of({"cpu": cpu}) if cpu else {},
        consumed={"cpu": Fraction(consumed)},
        charged={"cpu": Fraction(consumed)},
    )


ALLOC = {"cpu": Fraction(10)}


def test_no_min_resources_is_admitted():
    assert verdict(
        group(cpu=None), [resource_quota("q", hard={"cpu": "1"}, used={"cpu": "1"})], {}, [], []
    ).admitted


def test_quota_counts_used_and_other_holders():
    assert verdict(
        group(), [resource_quota("q", hard={"cpu": "8"}, used={"cpu": "4"})], ALLOC, [], []
    ).admitted
    refused = verdict(group(), [resource_quota("q", hard={"cpu": "8"}, used={"cpu": "5"})], ALLOC, [], [])
    assert not refused.admitted and "quota q insufficient" in refused.reason
    other = group(key="ns/other", cpu="2", phase="Inqueue")
    assert not verdict(
        group(), [resource_quota("q", hard={"cpu": "8"}, used={"cpu": "3"})], ALLOC, [], [other]
    ).admitted
    # another namespace's group and a Pending group hold nothing here
    assert verdict(
        group(),
        [resource_quota("q", hard={"cpu": "8"}, used={"cpu": "3"})],
        ALLOC,
        [],
        [group(key="x/o", ns="x", phase="Inqueue")],
    ).admitted
    assert verdict(
        group(),
        [resource_quota("q", hard={"cpu": "8"}, used={"cpu": "3"})],
        ALLOC,
        [],
        [group(key="ns/o", phase="Pending")],
    ).admitted


def test_capacity_ignores_lower_priority_pods_unless_the_group_never_preempts():
    low = [BoundPod(10, {"cpu": Fraction(8)})]
    assert verdict(group(), [], ALLOC, low, []).admitted
    assert not verdict(group(preempts=False), [], ALLOC, low, []).admitted
    high = [BoundPod(100, {"cpu": Fraction(7)})]
    refused = verdict(group(), [], ALLOC, high, [])
    assert not refused.admitted and "cluster capacity insufficient" in refused.reason


def test_own_members_do_not_compete_with_the_group():
    # 3 of the 4 cpus are already used by its own bound members; only 1 more is needed.
    own = group(consumed="3")
    others = [BoundPod(100, {"cpu": Fraction(3)}), BoundPod(100, {"cpu": Fraction(6)})]
    assert verdict(own, [], ALLOC, others, []).admitted
    assert not verdict(group(), [], ALLOC, others, []).admitted
