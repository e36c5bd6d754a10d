"""The alert state machine on its own: `for`, hysteresis, reminders."""

from __future__ import annotations

from chunkmq.alerts.state import Alert, Notice, State

S = 1000


def feed(alert: Alert, values: list[tuple[int, float]], threshold: float = 100, for_ms: int = 10 * S,
         renotify_ms: int = 0) -> list[Notice | None]:
    return [alert.step(v, threshold, for_ms, renotify_ms, t)[1] for t, v in values]


def test_fires_only_after_the_breach_held_for_the_duration() -> None:
    a = Alert(1, "q", "g")
    assert feed(a, [(0, 150), (5 * S, 150)]) == [None, None]
    assert a.state is State.PENDING
    assert feed(a, [(10 * S, 150)]) == [Notice.FIRING]
    assert (a.state, a.fired_at_ms, a.breach_since_ms) == (State.FIRING, 10 * S, 0)


def test_a_breach_shorter_than_the_duration_goes_back_to_ok() -> None:
    a = Alert(1, "q", "g")
    transitions, notice = a.step(150, 100, 10 * S, 0, 0)
    assert transitions == [(State.OK, State.PENDING)] and notice is None
    transitions, notice = a.step(99, 100, 10 * S, 0, 5 * S)
    assert transitions == [(State.PENDING, State.OK)] and notice is None
    assert feed(a, [(6 * S, 150), (15 * S, 150), (16 * S, 150)]) == [None, None, Notice.FIRING]


def test_resolves_below_ninety_percent_held_for_the_duration() -> None:
    a = Alert(1, "q", "g")
    feed(a, [(0, 150), (10 * S, 150)])
    # 95 is under the threshold but over the resolve line: still firing
    assert feed(a, [(20 * S, 95), (60 * S, 91)]) == [None, None]
    assert a.state is State.FIRING and a.clear_since_ms is None
    # under 90, but back over it before the duration: the clock restarts
    assert feed(a, [(70 * S, 80), (75 * S, 92), (80 * S, 80), (89 * S, 80)]) == [None] * 4
    assert a.state is State.FIRING
    assert feed(a, [(90 * S, 80)]) == [Notice.RESOLVED]
    assert a.state is State.RESOLVED
    # a new breach starts over at PENDING
    assert feed(a, [(100 * S, 120)]) == [None] and a.state is State.PENDING


def test_reminders_follow_the_renotify_interval_and_zero_means_once() -> None:
    a = Alert(1, "q", "g")
    notices = feed(a, [(t * S, 150) for t in range(0, 200, 10)], for_ms=0, renotify_ms=60 * S)
    assert notices.count(Notice.FIRING) == 1
    assert [i * 10 for i, n in enumerate(notices) if n is Notice.REMINDER] == [60, 120, 180]
    b = Alert(1, "q", "g")
    notices = feed(b, [(t * S, 150) for t in range(0, 7200, 60)], for_ms=0, renotify_ms=0)
    assert notices.count(Notice.FIRING) == 1 and Notice.REMINDER not in notices


def test_zero_values_never_breach_a_zero_threshold() -> None:
    a = Alert(1, "q", "")
    assert feed(a, [(0, 0), (S, 0)], threshold=0, for_ms=0) == [None, None]
    assert feed(a, [(2 * S, 1)], threshold=0, for_ms=0) == [Notice.FIRING]
    assert feed(a, [(3 * S, 0)], threshold=0, for_ms=0) == [Notice.RESOLVED]
