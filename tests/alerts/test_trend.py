"""What the alert engine samples itself (app/alerts/trend.py): when a group's consumers were last
seen, and each queue's dead letters over the last hour, from read-model views at given instants."""

from __future__ import annotations

from chunkmq.alerts.trend import HOUR_MS, STEP_MS, UNREAD, Watch
from chunkmq.broker.views import ConsumerView, GroupView, QueueView


def _group(name: str, lag: int = 0, seen: tuple[int, ...] = ()) -> GroupView:
    return GroupView("q", name, 0, 0, lag, 0.0, 0, 0, 0, tuple(ConsumerView(f"c{i}", at) for i, at in enumerate(seen)),
                     None, 0, False, 0)


def _queue(dead: int, *groups: GroupView, name: str = "q") -> QueueView:
    return QueueView(name, 1, 0, 0, 0, 0, True, True, 0, 0, dead, 0, {}, 0, 0, None, groups)


def test_consumers_last_seen_and_groups_never_seen() -> None:
    watch = Watch()
    watch.observe([_queue(0, _group("g", seen=(100, 250)), _group("idle"))], now_ms=1000)
    assert watch.consumer_seen_at("q", "g") == 250  # the newest consumer
    assert watch.consumer_seen_at("q", "idle") == 1000  # counted from the first time it had none
    watch.observe([_queue(0, _group("g"), _group("idle"))], now_ms=5000)
    assert watch.consumer_seen_at("q", "g") == 250 and watch.consumer_seen_at("q", "idle") == 1000
    watch.observe([_queue(0, _group("g"))], now_ms=6000)
    assert watch.consumer_seen_at("q", "idle") is None  # a deleted group is forgotten


def test_an_unread_queue_counts_only_while_messages_wait() -> None:
    watch = Watch()
    watch.observe([_queue(0, _group(UNREAD, lag=0))], now_ms=1000)
    watch.observe([_queue(0, _group(UNREAD, lag=0))], now_ms=2000)
    assert watch.consumer_seen_at("q", UNREAD) == 2000  # nothing waits: as if just seen
    watch.observe([_queue(0, _group(UNREAD, lag=5))], now_ms=3000)
    watch.observe([_queue(0, _group(UNREAD, lag=5))], now_ms=9000)
    assert watch.consumer_seen_at("q", UNREAD) == 3000  # waiting since first seen waiting
    watch.observe([_queue(0, _group(UNREAD, lag=0))], now_ms=10_000)
    watch.observe([_queue(0, _group(UNREAD, lag=2))], now_ms=60_000)  # looked at again when messages came
    assert watch.consumer_seen_at("q", UNREAD) == 60_000


def test_dead_letters_over_a_window() -> None:
    watch = Watch()
    for at, dead in ((0, 0), (STEP_MS, 4), (2 * STEP_MS, 4), (3 * STEP_MS, 10)):
        watch.observe([_queue(dead)], now_ms=at)
    assert watch.dead_lettered_since("q", 0) == 10
    assert watch.dead_lettered_since("q", STEP_MS) == 6  # from the sample at STEP_MS (4) to the last (10)
    assert watch.dead_lettered_since("nope", 0) == 0
    watch.observe([_queue(13)], now_ms=3 * STEP_MS + HOUR_MS + 1)
    assert watch.dead_lettered_since("q", 0) == 3  # the samples before the last hour are gone
    watch.forget("q")
    assert watch.dead_lettered_since("q", 0) == 0  # a deleted queue is forgotten
