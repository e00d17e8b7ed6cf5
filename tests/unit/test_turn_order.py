"""Where a ledger turn starts (priogate.ledger.turn_order): the watch's copy or a GET, by the stamps."""

from __future__ import annotations

import pytest

from priogate.ledger.turn_order import TURN_ANNOTATION, UNSTAMPED, Start, Turn, start_from, turn_of

OTHER = Turn(7, "pod-b")
OURS = 7


@pytest.mark.parametrize(
    ("copy", "ours", "others_active", "waited_out", "expected"),
    [
        # Newer than anything the pod wrote: another writer's write, start from it at once.
        (Turn(8, "pod-b"), OURS, True, False, Start.COPY),
        (Turn(8, "pod-b"), OURS, False, False, Start.COPY),
        # The pod knows nothing it wrote (a new pod, another ledger): the copy is the best known.
        (Turn(3, "pod-b"), -1, True, False, Start.COPY),
        (UNSTAMPED, -1, False, False, Start.COPY),
        # The pod's own last write is the newest: wait for a busy other writer, not for an idle one.
        (Turn(OURS, "pod-a"), OURS, True, False, Start.WAIT),
        (Turn(OURS, "pod-a"), OURS, True, True, Start.COPY),
        (Turn(OURS, "pod-a"), OURS, False, False, Start.COPY),
        # The watch has not shown the pod's last write yet: wait for it, then GET.
        (Turn(6, "pod-a"), OURS, False, False, Start.WAIT),
        (Turn(6, "pod-a"), OURS, True, False, Start.WAIT),
        (Turn(6, "pod-a"), OURS, False, True, Start.GET),
        # A copy whose stamp is gone (written by hand, or by a priogate before the stamps).
        (UNSTAMPED, OURS, False, False, Start.WAIT),
        (UNSTAMPED, OURS, False, True, Start.GET),
    ],
)
def test_where_a_turn_starts(copy: Turn, ours: int, others_active: bool, waited_out: bool, expected: Start):
    assert start_from(copy, ours, others_active, waited_out) is expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({TURN_ANNOTATION: "12 3f9a0c1b2d4e"}, Turn(12, "3f9a0c1b2d4e")),
        ({TURN_ANNOTATION: "0 controller"}, Turn(0, "controller")),
        (None, UNSTAMPED),
        ({}, UNSTAMPED),
        ({TURN_ANNOTATION: "12"}, UNSTAMPED),  # no writer
        ({TURN_ANNOTATION: "-1 pod-a"}, UNSTAMPED),
        ({TURN_ANNOTATION: "twelve pod-a"}, UNSTAMPED),
        ({TURN_ANNOTATION: 12}, UNSTAMPED),  # not a string
    ],
)
def test_a_stamp_is_read_or_taken_as_none(annotations, expected: Turn):
    meta = {"name": "podgroup-ledger.team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    assert turn_of({"metadata": meta}) == expected


def test_a_write_is_stamped_one_above_the_copy_it_was_decided_on():
    assert Turn(12, "pod-b").next("pod-a") == Turn(13, "pod-a")
    assert UNSTAMPED.next("pod-a") == Turn(0, "pod-a")
    stamped = {"metadata": {"annotations": {TURN_ANNOTATION: Turn(13, "pod-a").annotation()}}}
    assert turn_of(stamped) == Turn(13, "pod-a")
