"""Time to clear: where a group's lag is heading, and when it will be gone at the current rates.

The one place the estimate is made, from the group's history points (app/broker/history.py keeps
them and calls `estimate` at each sample; the views, the console and the `time_to_clear` alert read
the result). Over the last WINDOW_MS of points the lag's trend is its change per second, newest
minus oldest: the ack rate less the rate new messages arrive for the group. While the lag falls,
the time to clear is the lag divided by the fall per second; while it grows or stands still, it has
none.

| state    | when                                                                  |
|----------|-----------------------------------------------------------------------|
| clear    | no lag                                                                |
| clearing | the lag fell over the window: `seconds` is the time left              |
| growing  | the lag rose over the window                                          |
| steady   | the lag has not moved over the window (nothing acked, or acks keep pace with arrivals) |
| unknown  | fewer than two samples yet                                            |
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

WINDOW_MS = 300_000  # the trend is taken over the last 5 minutes of samples (as far as they go)

State = Literal["clear", "clearing", "growing", "steady", "unknown"]
STATES: tuple[State, ...] = ("clear", "clearing", "growing", "steady", "unknown")


class LagPoint(Protocol):
    """A sample of a group: when (epoch ms) and its lag (history.GroupPoint is one)."""

    @property
    def t(self) -> int: ...
    @property
    def lag(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Clearing:
    state: State
    lag_trend: float  # messages per second over the window; positive: the lag grows
    seconds: float | None  # the time to clear at the current rates, while clearing (0 when clear)


UNKNOWN = Clearing("unknown", 0.0, None)
CLEAR = Clearing("clear", 0.0, 0.0)


def estimate(points: Sequence[LagPoint], window_ms: int = WINDOW_MS) -> Clearing:
    """The estimate from a group's points, oldest first (the newest is now)."""
    if not points:
        return UNKNOWN
    newest = points[-1]
    if newest.lag <= 0:
        return CLEAR
    first = bisect_left(points, newest.t - window_ms, key=lambda p: p.t)
    oldest = points[min(first, len(points) - 1)]
    seconds = (newest.t - oldest.t) / 1000
    if seconds <= 0:
        return UNKNOWN
    trend = round((newest.lag - oldest.lag) / seconds, 3)
    if trend < 0:
        return Clearing("clearing", trend, round(newest.lag / -trend, 1))
    return Clearing("growing" if trend > 0 else "steady", trend, None)
