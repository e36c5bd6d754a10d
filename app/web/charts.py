"""Chart data for the console, from the broker's history (app/broker/history.py).

Every chart is {"t": [epoch seconds], "series": [{"label", "values"}]}: the columns uPlot draws
(static/console.js). Queue and group charts come from History's series (memory and database); the
overview sums every queue's points: the database's for the hour, the memory rings' for what is
newer than the last write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from chunkmq.broker import views
from chunkmq.broker.base import now_ms
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.history import QueuePoint
from chunkmq.broker.views import QueueView

RANGES = {"1h": 3600, "24h": 24 * 3600, "7d": 7 * 24 * 3600}
# At most this many points per chart: a week of 1-minute points would be 10,080.
MAX_POINTS = 720
Chart = dict[str, Any]


def chart(points: Sequence[Any], fields: Iterable[tuple[str, str]]) -> Chart:
    return {
        "t": [p.t / 1000 for p in points],
        "series": [{"label": label, "values": [getattr(p, name) for p in points]} for name, label in fields],
    }


def window(range_: str) -> tuple[int | None, float]:
    """(since in epoch ms, step in seconds) of a chart range. The hour is History's default window:
    an explicit `now - 1 h` would be a few ms older than the fine points kept by the time History
    reads it, and get the coarse points instead."""
    if range_ not in RANGES:
        raise InvalidInput(f"range must be one of {', '.join(RANGES)}")
    seconds = RANGES[range_]
    return (None if range_ == "1h" else now_ms() - seconds * 1000), seconds / MAX_POINTS


async def queue_charts(broker: Broker, queue: QueueView, range_: str) -> dict[str, Chart]:
    since, step = window(range_)
    series = await broker.history.queue_series(queue, since, step)
    points = series.points
    out = {
        "depth": chart(points, [("messages", "messages")]),
        "rates": chart(points, [("publish_rate", "publish/s"), ("deliver_rate", "deliver/s")]),
    }
    groups = {name: (await broker.history.group_series(queue, name, since, step)).points
              for name in [g.name for g in queue.groups]}
    times = sorted({p.t for pts in groups.values() for p in pts})
    index = {t: i for i, t in enumerate(times)}
    for key, field, unit in (("lag", "lag", "msgs"), ("lag_seconds", "lag_seconds", "s")):
        lines = []
        for name, pts in groups.items():
            values: list[float | None] = [None] * len(times)
            for p in pts:
                values[index[p.t]] = getattr(p, field)
            lines.append({"label": f"{name} ({unit})", "values": values})
        out[key] = {"t": [t / 1000 for t in times], "series": lines}
    return out


async def overview_charts(broker: Broker) -> dict[str, Chart]:
    history = broker.history
    since = now_ms() - RANGES["1h"] * 1000
    totals: dict[int, list[float]] = {p.t: list(p[1:]) for p in await history.stored_totals(since, now_ms() + 1)}
    newest_written = max(totals, default=since)
    memory: dict[int, list[float]] = {}
    for name in views.queue_names(broker):
        for p in history.queue_points(name, newest_written + 1):
            sums = memory.setdefault(p.t, [0.0, 0.0, 0.0, 0.0])
            for i, value in enumerate(p[1:]):
                sums[i] += value
    totals.update(memory)
    points = [QueuePoint(t, *values) for t, values in sorted(totals.items())]
    return {
        "rates": chart(points, [("publish_rate", "publish/s"), ("deliver_rate", "deliver/s")]),
        "messages": chart(points, [("messages", "messages in queues")]),
    }
