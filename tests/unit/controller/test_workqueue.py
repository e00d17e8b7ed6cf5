"""The work queue's guarantees (client-go workqueue's), with a fake clock."""

from __future__ import annotations

from controller.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_adds_coalesce_and_order_is_kept():
    q = WorkQueue()
    for key in ("a", "b", "a", "c", "b"):
        q.add(key)
    assert q.depth() == 3
    assert [q.get(0), q.get(0), q.get(0), q.get(0)] == ["a", "b", "c", None]


def test_a_key_being_processed_is_requeued_once_on_done():
    q = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")
    q.add("a")
    assert q.get(0) is None, "not handed to a second worker while processing"
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None


def test_delayed_and_backoff():
    clock = Clock()
    q = WorkQueue(base_delay=1.0, max_delay=4.0, clock=clock)
    q.add_after("late", 5)
    assert q.get(0) is None
    clock.now = 5
    assert q.get(0) == "late"
    q.done("late")
    assert [q.retry("x"), q.retry("x"), q.retry("x"), q.retry("x")] == [1.0, 2.0, 4.0, 4.0]
    q.forget("x")
    assert q.retry("x") == 1.0


def test_shut_down_wakes_getters():
    q = WorkQueue()
    q.shut_down()
    assert q.get() is None
    q.add("a")
    assert q.depth() == 0
