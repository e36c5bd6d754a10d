"""The time-to-clear estimate (app/broker/clearing.py) on hand-made series."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from chunkmq.broker.clearing import UNKNOWN, WINDOW_MS, Clearing, estimate


class P(NamedTuple):
    t: int
    lag: float


def series(*lags: float, step_ms: int = 5000) -> list[P]:
    return [P(1_000_000 + i * step_ms, lag) for i, lag in enumerate(lags)]


def test_a_falling_lag_clears_at_its_rate_of_fall() -> None:
    # 1000 -> 900 in 10 s: 10 messages/s; 900 left: 90 s
    assert estimate(series(1000, 950, 900)) == Clearing("clearing", -10.0, 90.0)


def test_a_growing_or_standing_lag_has_no_time_to_clear() -> None:
    assert estimate(series(100, 150, 200)) == Clearing("growing", 10.0, None)
    assert estimate(series(100, 100, 100)) == Clearing("steady", 0.0, None)


def test_no_lag_is_clear_and_too_few_samples_unknown() -> None:
    assert estimate(series(500, 0)) == Clearing("clear", 0.0, 0.0)
    assert estimate(series(5)) == UNKNOWN
    assert estimate([]) == UNKNOWN


def test_only_the_window_counts() -> None:
    # a burst long ago, then a steady fall of 1 message/s over the last window
    step = 60_000
    old = [50_000.0] * 3
    recent = [600.0 - i * 60 for i in range(WINDOW_MS // step + 1)]  # 600 ... 300 over 5 minutes
    got = estimate(series(*old, *recent, step_ms=step))
    assert got.state == "clearing" and got.lag_trend == pytest.approx(-1.0) and got.seconds == pytest.approx(300.0)
    assert estimate(series(100, 200, 300), window_ms=5000) == Clearing("growing", 20.0, None)
