"""History of queue and group metrics, for charts, the history API and alert trends.

Every CHUNKMQ_HISTORY_INTERVAL_SECONDS (5 s) a background job samples the read model (views.py):

- per queue: messages, bytes, publish rate, deliver rate (`QueuePoint`);
- per group: lag in messages and in seconds, ack rate, consumers online, the ack floor and
  `floor_moved_at`, when the ack floor last moved (`GroupPoint`; what the `stalled` alert needs).

Rates are counter differences between two samples. Two resolutions are kept:

- fine: every sample; the newest CHUNKMQ_HISTORY_MEMORY_SECONDS (15 min) in a ring in memory, the
  newest CHUNKMQ_HISTORY_FINE_SECONDS (1 h) in the database;
- coarse: one point per CHUNKMQ_HISTORY_COARSE_STEP_SECONDS (1 min) bucket, stamped with the time of
  its first sample: the mean of each value, except the newest ack floor / floor_moved_at and the most
  consumers; kept CHUNKMQ_HISTORY_COARSE_SECONDS (7 days).

Every aggregated point (coarse, or downsampled for a chart) carries the time of the first point it
holds, never its bucket's start: a bucket that starts before the queue existed, or before a restart's
first sample, would otherwise be drawn minutes before the data in it.

Points are written behind (every CHUNKMQ_HISTORY_FLUSH_SECONDS, and on shutdown) with old ones pruned,
so charts survive a restart. Series are keyed by queue id, which is never reused: the history of a
deleted queue cannot reappear under a new queue of the same name, and the database deletes it with
its queue or group (ON DELETE CASCADE).

A sample costs a view only for the queues that changed: a queue the store reports unchanged since
the previous sample (no append, no trim), whose groups' delivery state did not change either
(`Group.changes`), and whose previous point was at rest (no rate, no lag, no consumer seen) gets
its previous points again, stamped now, which is what a view would give.

Threading: `sample` and the in-memory reads run on the event loop thread; SQL runs in worker threads
(`asyncio.to_thread`). Nothing on the publish or pull path touches this module.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from chunkmq.broker.group import now_ms
from chunkmq.broker.sources import QueuesSource
from chunkmq.config import Settings

if TYPE_CHECKING:
    from chunkmq.meta import MetaStore

__all__ = ["GroupPoint", "History", "QueuePoint", "downsample"]

_SLICE = 50  # queues sampled between two yields to the event loop
_MAX_PENDING = 500_000  # points kept for the database while it cannot be written; older ones are dropped


class QueuePoint(NamedTuple):
    t: int  # epoch ms: when sampled, or when the first sample of an aggregated bucket was
    messages: float
    bytes: float
    publish_rate: float  # messages/s stored into the queue
    deliver_rate: float  # messages/s delivered to its groups, redeliveries included


class GroupPoint(NamedTuple):
    t: int
    lag: float  # messages not yet finished
    lag_seconds: float  # age of the oldest unacked message
    ack_rate: float  # messages/s acknowledged
    consumers: float  # consumers seen in the last 5 minutes
    ack_floor: int
    floor_moved_at: int  # epoch ms when the ack floor last moved (to sampling precision)


P = TypeVar("P", QueuePoint, GroupPoint)

# How a bucket of points becomes one point: the mean, except these.
_NEWEST = frozenset({"ack_floor", "floor_moved_at"})
_MOST = frozenset({"consumers"})


def _aggregate(kind: type[P], points: Sequence[P]) -> P:
    """One point for a bucket of `points` (oldest first), stamped with the first one's time."""
    values: list[Any] = [points[0].t]
    for i, name in enumerate(kind._fields[1:], start=1):
        if name in _NEWEST:
            values.append(points[-1][i])
        elif name in _MOST:
            values.append(max(p[i] for p in points))
        else:
            values.append(round(sum(p[i] for p in points) / len(points), 3))
    return kind(*values)


def downsample(points: Sequence[P], step_ms: int) -> list[P]:
    """One point per `step_ms` bucket of `points` (oldest first), stamped with its first point's time."""
    out: list[P] = []
    bucket: list[P] = []
    start = -1
    for p in points:
        b = p.t - p.t % step_ms
        if b != start and bucket:
            out.append(_aggregate(type(p), bucket))
            bucket = []
        start = b
        bucket.append(p)
    if bucket:
        out.append(_aggregate(type(bucket[0]), bucket))
    return out


@dataclass(slots=True)
class _Series:
    """One queue's or group's points in memory, and what the next sample needs."""

    ring: deque[Any]  # fine points, oldest first
    counters: tuple[int, ...] = ()  # counters at the previous sample, for rates
    sampled_at: int = 0
    bucket: int = -1  # start of the coarse bucket being filled
    filling: list[Any] = field(default_factory=list)  # its fine points so far
    floor: int = -1
    floor_moved_at: int = 0


@dataclass(frozen=True, slots=True)
class Series:
    """Points of one queue or group, as the history API serves them."""

    step_ms: int  # the resolution of `points`
    since: int
    points: list[Any]

    def columns(self, fields: Sequence[str]) -> dict[str, list[Any]]:
        """One list per field, `t` first: the shape uPlot draws."""
        out: dict[str, list[Any]] = {"t": [p.t for p in self.points]}
        for name in fields:
            out[name] = [getattr(p, name) for p in self.points]
        return out


class HistorySource(QueuesSource, Protocol):
    """What the history reads of the broker (a Broker is one): its settings, the queues it samples,
    their offsets, and the database it writes behind to."""

    @property
    def settings(self) -> Settings: ...
    @property
    def meta(self) -> MetaStore: ...


class Keyed(Protocol):
    """A queue or its view: the history keys its series by queue id."""

    @property
    def id(self) -> int: ...


class History:
    def __init__(self, broker: HistorySource) -> None:
        s = broker.settings
        self.broker = broker
        self.step_ms = max(1, round(s.history_interval_seconds * 1000))
        # the coarse step is a multiple of the fine one, at least twice it: the two never share a step_ms
        self.coarse_ms = max(2, math.ceil(s.history_coarse_step_seconds * 1000 / self.step_ms)) * self.step_ms
        self.fine_keep_ms = round(s.history_fine_seconds * 1000)
        self.coarse_keep_ms = round(s.history_coarse_seconds * 1000)
        self._ring_len = max(2, math.ceil(s.history_memory_seconds * 1000 / self.step_ms))
        self._queues: dict[int, _Series] = {}
        self._groups: dict[tuple[int, str], _Series] = {}
        # Points for the database: (queue id, group name or None, step_ms, point).
        self._pending: list[tuple[int, str | None, int, Any]] = []
        # Per group, (ack floor, floor_moved_at) of its newest stored point: read at start by `load`.
        self._restored: dict[tuple[int, str], tuple[int, int]] = {}
        # Per queue, its groups and their change counters when its view was last taken.
        self._marks: dict[int, tuple[tuple[str, int], ...]] = {}

    # ------------------------------------------------------------------ sampling (event loop)

    async def load(self) -> None:
        """Read when each group's floor last moved before the restart (once, at start)."""
        rows = await asyncio.to_thread(self.broker.meta.last_group_floors)
        self._restored = {(q, g): (floor, moved) for q, g, floor, moved in rows}

    async def sample(self, now: int | None = None) -> None:
        """Take one point of every queue and group from the read model (background job). Yields to the
        event loop every _SLICE queues: with many queues a sample takes tens of milliseconds, which
        publishes and pulls must not wait for in one piece."""
        from chunkmq.broker import views  # not at import: a server's first stage does without

        now = now_ms() if now is None else now
        broker = self.broker
        queues: dict[int, _Series] = {}
        groups: dict[tuple[int, str], _Series] = {}
        changed = broker.store.changed_queues("history")
        viewed = 0
        for queue in list(broker.queues.values()):
            mark = tuple([(g.name, g.changes) for g in queue.groups.values()])
            unchanged = queue.id not in changed and self._marks.get(queue.id) == mark
            if unchanged and self._again(queue.id, mark, now, queues, groups):
                continue
            viewed += 1
            if viewed % _SLICE == 0:
                await asyncio.sleep(0)
                if broker.queues_by_id.get(queue.id) is not queue:
                    continue  # deleted meanwhile
            self._marks[queue.id] = mark
            qv = views.queue_view(broker, queue, now)
            series = queues[qv.id] = self._queues.get(qv.id) or _Series(deque(maxlen=self._ring_len))
            publish, deliver = self._rates(series, now, (qv.messages_in, qv.delivered))
            self._add(series, qv.id, None, QueuePoint(now, qv.messages, qv.bytes, publish, deliver))
            for gv in qv.groups:
                key = (qv.id, gv.name)
                series = groups[key] = self._groups.get(key) or _Series(deque(maxlen=self._ring_len))
                moved = self._floor_moved(series, key, gv.ack_floor, now)
                (ack_rate,) = self._rates(series, now, (gv.acked,))
                point = GroupPoint(now, gv.lag, round(gv.lag_seconds, 3), ack_rate, len(gv.consumers),
                                   gv.ack_floor, moved)
                self._add(series, qv.id, gv.name, point)
        # Series of queues and groups deleted (and forgotten) before or during this sample are gone.
        alive = broker.queues_by_id
        self._queues = {k: s for k, s in queues.items() if k in alive}
        self._groups = {k: s for k, s in groups.items() if k[0] in alive and k[1] in alive[k[0]].groups}
        self._restored.clear()

    def _again(self, queue_id: int, mark: tuple[tuple[str, int], ...], now: int, queues: dict[int, _Series],
               groups: dict[tuple[int, str], _Series]) -> bool:
        """Sample a queue that did not change by repeating its points at rest; False if they were not."""
        series = self._queues.get(queue_id)
        if series is None or not series.ring or series.ring[-1][3:] != (0.0, 0.0):
            return False
        keys = [(queue_id, name) for name, _ in mark]
        kept = [self._groups.get(key) for key in keys]
        for g in kept:
            if g is None or not g.ring or g.ring[-1][1:5] != (0, 0.0, 0.0, 0):  # lag, lag_seconds, ack rate, consumers
                return False
        series.sampled_at = now  # the counters stand: the next rates divide by the time since now
        queues[queue_id] = series
        self._add(series, queue_id, None, series.ring[-1]._replace(t=now))
        for key, g in zip(keys, kept, strict=True):
            assert g is not None
            g.sampled_at = now
            groups[key] = g
            self._add(g, queue_id, key[1], g.ring[-1]._replace(t=now))
        return True

    @staticmethod
    def _rates(series: _Series, now: int, counters: tuple[int, ...]) -> tuple[float, ...]:
        seconds = (now - series.sampled_at) / 1000
        if len(series.counters) == len(counters) and seconds > 0:
            pairs = zip(counters, series.counters, strict=True)
            rates = tuple(round(max(0, c - before) / seconds, 2) for c, before in pairs)
        else:
            rates = (0.0,) * len(counters)
        series.counters, series.sampled_at = counters, now
        return rates

    def _floor_moved(self, series: _Series, key: tuple[int, str], floor: int, now: int) -> int:
        if series.floor_moved_at == 0:  # first sample of this group since start
            restored = self._restored.get(key)
            series.floor_moved_at = restored[1] if restored is not None and restored[0] == floor else now
        elif floor != series.floor:
            series.floor_moved_at = now
        series.floor = floor
        return series.floor_moved_at

    def _add(self, series: _Series, queue_id: int, group: str | None, point: Any) -> None:
        series.ring.append(point)
        pending = self._pending
        pending.append((queue_id, group, self.step_ms, point))
        bucket = point.t - point.t % self.coarse_ms
        if bucket != series.bucket:
            if series.filling:
                pending.append((queue_id, group, self.coarse_ms, _aggregate(type(point), series.filling)))
            series.bucket, series.filling = bucket, []
        series.filling.append(point)

    def forget(self, queue_id: int, group: str | None = None) -> None:
        """A queue (with its groups) or a group was deleted: its series and unwritten points go; the
        database deletes its stored points with it."""
        self._marks.pop(queue_id, None)  # its next sample takes a view
        if group is None:
            self._queues.pop(queue_id, None)
            for key in [k for k in self._groups if k[0] == queue_id]:
                del self._groups[key]
            self._pending = [e for e in self._pending if e[0] != queue_id]
        else:
            self._groups.pop((queue_id, group), None)
            self._pending = [e for e in self._pending if (e[0], e[1]) != (queue_id, group)]

    # ------------------------------------------------------------------ writing behind

    async def flush(self) -> int:
        """Write the points sampled since the last flush and prune old ones (background job)."""
        pending, self._pending = self._pending, []
        try:
            await asyncio.to_thread(self._write, pending, now_ms())
        except Exception:
            self._pending = (pending + self._pending)[-_MAX_PENDING:]  # retried with the next flush
            raise
        return len(pending)

    async def close(self) -> None:
        """On shutdown: write the coarse buckets being filled too, then everything pending."""
        for key, series in self._queues.items():
            if series.filling:
                self._pending.append((key, None, self.coarse_ms, _aggregate(QueuePoint, series.filling)))
        for (queue_id, group), series in self._groups.items():
            if series.filling:
                self._pending.append(
                    (queue_id, group, self.coarse_ms, _aggregate(GroupPoint, series.filling))
                )
        await self.flush()

    def _write(self, pending: list[tuple[int, str | None, int, Any]], now: int) -> None:
        queue_rows = [{"queue_id": q, "step_ms": step, **p._asdict()} for q, g, step, p in pending if g is None]
        group_rows = [{"queue_id": q, "group_name": g, "step_ms": step, **p._asdict()}
                      for q, g, step, p in pending if g is not None]
        meta = self.broker.meta
        meta.save_history(queue_rows, group_rows)
        meta.prune_history(now - self.fine_keep_ms, now - self.coarse_keep_ms, self.coarse_ms)

    # ------------------------------------------------------------------ reading

    def floor_moved_at(self, queue: str, group: str) -> int | None:
        """Epoch ms when the group's ack floor last moved (to sampling precision; across restarts),
        or None before the group's first sample. For the `stalled` alert: lag > 0 and this is old."""
        q = self.broker.queues.get(queue)
        series = self._groups.get((q.id, group)) if q is not None else None
        return series.floor_moved_at if series is not None and series.floor_moved_at else None

    def queue_points(self, queue: str, since: int = 0) -> list[QueuePoint]:
        """The queue's fine points in memory (the last CHUNKMQ_HISTORY_MEMORY_SECONDS) from `since`."""
        q = self.broker.queues.get(queue)
        series = self._queues.get(q.id) if q is not None else None
        return [p for p in series.ring if p.t >= since] if series is not None else []

    def group_points(self, queue: str, group: str, since: int = 0) -> list[GroupPoint]:
        """The group's fine points in memory from `since`, as queue_points."""
        q = self.broker.queues.get(queue)
        series = self._groups.get((q.id, group)) if q is not None else None
        return [p for p in series.ring if p.t >= since] if series is not None else []

    async def stored_totals(self, since: int, until: int) -> list[QueuePoint]:
        """Every queue's stored fine points summed per time in [since, until), oldest first (the
        overview's charts); what is newer than the last write is only in memory (`queue_points`)."""
        rows = await asyncio.to_thread(self.broker.meta.queue_history_totals, self.step_ms, since, until)
        return [QueuePoint(*row) for row in rows]

    async def queue_series(self, queue: Keyed, since: int | None, step: float | None) -> Series:
        """The queue's points from `since` (default: the last hour), at `step` seconds or finer, from
        memory and the database."""
        def load(step_ms: int, start: int, end: int) -> list[QueuePoint]:
            return [QueuePoint(*row) for row in self.broker.meta.queue_history(queue.id, step_ms, start, end)]

        return await self._series(self._queues.get(queue.id), (queue.id, None), since, step, load)

    async def group_series(self, queue: Keyed, group: str, since: int | None, step: float | None) -> Series:
        def load(step_ms: int, start: int, end: int) -> list[GroupPoint]:
            return [GroupPoint(*row) for row in self.broker.meta.group_history(queue.id, group, step_ms, start, end)]

        return await self._series(self._groups.get((queue.id, group)), (queue.id, group), since, step, load)

    async def _series(
        self, series: _Series | None, key: tuple[int, str | None], since: int | None, step: float | None,
        load: Callable[[int, int, int], list[Any]],
    ) -> Series:
        now = now_ms()
        since = now - 3_600_000 if since is None else since
        wanted = None if step is None else max(1, round(step * 1000))
        fine = since >= now - self.fine_keep_ms and (wanted is None or wanted < self.coarse_ms)
        resolution = self.step_ms if fine else self.coarse_ms
        points: dict[int, Any] = {}
        memory = list(series.ring) if series is not None else []
        if fine:
            start = memory[0].t if memory else now + 1
            if since < start:  # older than memory holds, or sampled before a restart
                points.update((p.t, p) for p in await asyncio.to_thread(load, resolution, since, start))
            points.update((p.t, p) for p in memory if p.t >= since)
        else:
            points.update((p.t, p) for p in await asyncio.to_thread(load, resolution, since, now + 1))
            points.update((p.t, p) for q, g, s, p in self._pending
                          if (q, g) == key and s == resolution and p.t >= since)
            if series is not None and series.filling and series.bucket + resolution > since:
                partial = _aggregate(type(series.filling[0]), series.filling)
                points[partial.t] = partial
        out = [points[t] for t in sorted(points)]
        if wanted is not None and wanted > resolution:
            out, resolution = downsample(out, wanted), wanted
        return Series(resolution, since, out)
