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

Rows are sparse: a queue or group gets a row (fine or coarse) only when its figures differ from its
previous row's, and every sample instant is written once (`history_samples`). A series read back
holds its newest row's values at every instant after it (`fill_forward`), which gives the points a
row per sample would have; retention keeps each series' newest row before its cut for that reason.

A sample visits only the queues the store reports changed (Store.changed_queues), those whose groups
changed (GroupChanges.take_queues: delivery state, a group added or removed, a consumer seen again),
and those not yet *settled*. A queue is settled when its points are at rest (no rate, no lag, no
consumer seen: figures time does not change) and its newest fine and coarse rows hold those values;
a settled queue costs nothing until it changes. A visited queue that did not change and whose points
are at rest gets its previous points again, stamped now, without a view: what a view would give.

Threading: `sample` and the in-memory reads run on the event loop thread; SQL runs in worker threads
(`asyncio.to_thread`). Nothing on the publish or pull path touches this module.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from chunkmq.broker.clearing import UNKNOWN, Clearing, estimate
from chunkmq.broker.group import GroupChanges, now_ms
from chunkmq.broker.queue import Queue
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


def fill_forward(rows: Sequence[P], instants: Iterable[int], start: int, until: int) -> list[P]:
    """A sparse series as sampled: at every instant and every row's time in [start, until), the newest
    row at or before it (`rows` oldest first; rows before `start` only carry their values in)."""
    times = sorted({t for t in instants if start <= t < until} | {p.t for p in rows if start <= p.t < until})
    out: list[P] = []
    i, last = 0, None
    for t in times:
        while i < len(rows) and rows[i].t <= t:
            last, i = rows[i], i + 1
        if last is not None:
            out.append(last if last.t == t else last._replace(t=t))
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
    fine_row: tuple[Any, ...] | None = None  # values of its newest fine row (written or pending)
    coarse_row: tuple[Any, ...] | None = None  # and of its newest coarse row
    clearing: Clearing = UNKNOWN  # a group's time to clear, as of its newest point


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
    their offsets and groups' changes, and the database it writes behind to."""

    @property
    def settings(self) -> Settings: ...
    @property
    def meta(self) -> MetaStore: ...
    @property
    def group_changes(self) -> GroupChanges: ...


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
        # Instants sampled, for the database (step_ms, t), and the newest ones in memory.
        self._samples: list[dict[str, int]] = []
        self._instants: deque[int] = deque(maxlen=self._ring_len)
        self._bucket = -1  # the coarse bucket of the newest sample
        self._active: set[int] = set()  # ids of the queues not settled: visited at every sample
        self._first = True  # the first sample visits every queue
        self._cuts = (0, 0)  # the fine and coarse cuts of the previous prune
        # Per group, (ack floor, floor_moved_at) of its newest stored point: read at start by `load`.
        self._restored: dict[tuple[int, str], tuple[int, int]] = {}

    # ------------------------------------------------------------------ sampling (event loop)

    async def load(self) -> None:
        """Read when each group's floor last moved before the restart (once, at start)."""
        rows = await asyncio.to_thread(self.broker.meta.last_group_floors)
        self._restored = {(q, g): (floor, moved) for q, g, floor, moved in rows}

    async def sample(self, now: int | None = None) -> None:
        """Take one point of every queue and group that may have changed (background job). Yields to
        the event loop every _SLICE queues: with many queues changing a sample takes tens of
        milliseconds, which publishes and pulls must not wait for in one piece."""
        now = now_ms() if now is None else now
        broker = self.broker
        changed = broker.store.changed_queues("history")
        moved = broker.group_changes.take_queues("history")
        alive = broker.queues_by_id
        every = self._first or moved is None
        self._first = False
        visit = list(alive) if every else list(changed | (moved or set()) | self._active)
        self._instants.append(now)
        self._samples.append({"step_ms": self.step_ms, "t": now})
        bucket = now - now % self.coarse_ms
        if bucket != self._bucket:
            self._bucket = bucket
            self._samples.append({"step_ms": self.coarse_ms, "t": now})
        for i, queue_id in enumerate(visit, 1):
            if i % _SLICE == 0:
                await asyncio.sleep(0)
            queue = alive.get(queue_id)
            if queue is None:  # deleted
                self.forget(queue_id)
                continue
            unchanged = not every and queue_id not in changed and queue_id not in (moved or ())
            if not (unchanged and self._again(queue, now)):
                self._view(queue, now)
            if self._settled(queue):
                self._active.discard(queue_id)
            else:
                self._active.add(queue_id)
        self._restored.clear()

    def _view(self, queue: Queue, now: int) -> None:
        """Points of a queue and its groups from a view of it."""
        from chunkmq.broker.views import queue_view  # not at import: a server's first stage does without

        qv = queue_view(self.broker, queue, now)
        series = self._series(self._queues, qv.id, qv.id, None, now)
        publish, deliver = self._rates(series, now, (qv.messages_in, qv.delivered))
        self._add(series, qv.id, None, QueuePoint(now, qv.messages, qv.bytes, publish, deliver))
        for gv in qv.groups:
            key = (qv.id, gv.name)
            series = self._series(self._groups, key, qv.id, gv.name, now)
            moved = self._floor_moved(series, key, gv.ack_floor, now)
            (ack_rate,) = self._rates(series, now, (gv.acked,))
            point = GroupPoint(now, gv.lag, round(gv.lag_seconds, 3), ack_rate, len(gv.consumers),
                               gv.ack_floor, moved)
            self._add(series, qv.id, gv.name, point)
            series.clearing = estimate(series.ring)

    def _series(self, table: dict[Any, _Series], key: Any, queue_id: int, group: str | None, now: int) -> _Series:
        series = table.get(key)
        if series is None:
            series = table[key] = _Series(deque(maxlen=self._ring_len))
        else:
            self._catch_up(series, queue_id, group, now)
        return series

    def _catch_up(self, series: _Series, queue_id: int, group: str | None, now: int) -> None:
        """Give a series that was settled its points at the instants it was not visited: its previous
        ones again (its figures did not change, or it would have been visited)."""
        if not series.ring:
            return
        last = series.ring[-1]
        missed = []
        for t in reversed(self._instants):
            if t <= last.t:
                break
            if t < now:
                missed.append(t)
        for t in reversed(missed):
            self._add(series, queue_id, group, last._replace(t=t))
        if missed:
            series.sampled_at = missed[0]  # its counters stood until then: the next rates divide by the time since

    def _again(self, queue: Queue, now: int) -> bool:
        """Sample a queue that did not change by repeating its points at rest; False if they were not."""
        series = self._queues.get(queue.id)
        if series is None or not series.ring or series.ring[-1][3:] != (0.0, 0.0):
            return False
        names = list(queue.groups)
        kept = [self._groups.get((queue.id, name)) for name in names]
        for g in kept:
            if g is None or not g.ring or g.ring[-1][1:5] != (0, 0.0, 0.0, 0):  # lag, lag_seconds, ack rate, consumers
                return False
        for s, name in [(series, None), *zip(kept, names, strict=True)]:
            assert s is not None
            self._catch_up(s, queue.id, name, now)
            s.sampled_at = now  # the counters stand: the next rates divide by the time since now
            self._add(s, queue.id, name, s.ring[-1]._replace(t=now))
        return True

    def _settled(self, queue: Queue) -> bool:
        """Whether a queue just visited can rest unvisited: its points and its groups' are at rest and
        its newest rows, fine and coarse, hold them (so its series read back the same)."""
        series = self._queues.get(queue.id)
        if series is None or not series.ring or series.ring[-1][3:] != (0.0, 0.0):
            return False
        groups = [self._groups.get((queue.id, name)) for name in queue.groups]
        for g in groups:
            if g is None or not g.ring or g.ring[-1][1:5] != (0, 0.0, 0.0, 0):
                return False
        if not all(_steady(s) for s in (series, *groups) if s is not None):
            return False
        for s, name in [(series, None), *zip(groups, queue.groups, strict=True)]:
            assert s is not None
            if s.coarse_row != tuple(s.ring[-1][1:]):  # what a bucket of these values only aggregates to
                # The bucket being filled holds these values only: its coarse point now, which the
                # bucket's end gives again if nothing moves, and writes anew (same time) if something does.
                self._add_coarse(s, queue.id, name)
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
        values = tuple(point[1:])
        if values != series.fine_row:  # a row only when the figures changed
            self._pending.append((queue_id, group, self.step_ms, point))
            series.fine_row = values
        bucket = point.t - point.t % self.coarse_ms
        if bucket != series.bucket:
            if series.filling:
                self._add_coarse(series, queue_id, group)
            series.bucket, series.filling = bucket, []
        series.filling.append(point)

    def _add_coarse(self, series: _Series, queue_id: int, group: str | None) -> None:
        point = _aggregate(type(series.filling[0]), series.filling)
        values = tuple(point[1:])
        if values != series.coarse_row:
            self._pending.append((queue_id, group, self.coarse_ms, point))
            series.coarse_row = values

    def forget(self, queue_id: int, group: str | None = None) -> None:
        """A queue (with its groups) or a group was deleted: its series and unwritten points go; the
        database deletes its stored points with it."""
        if group is None:
            self._active.discard(queue_id)
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
        samples, self._samples = self._samples, []
        now = now_ms()
        cuts = (now - self.fine_keep_ms, now - self.coarse_keep_ms)
        try:
            await asyncio.to_thread(self._write, pending, samples, cuts)
        except Exception:
            self._pending = (pending + self._pending)[-_MAX_PENDING:]  # retried with the next flush
            self._samples = samples + self._samples
            raise
        self._cuts = cuts
        return len(pending)

    async def close(self) -> None:
        """On shutdown: write the coarse buckets being filled too, then everything pending."""
        for key, series in self._queues.items():
            if series.filling:
                self._add_coarse(series, key, None)
        for (queue_id, group), series in self._groups.items():
            if series.filling:
                self._add_coarse(series, queue_id, group)
        await self.flush()

    def _write(self, pending: list[tuple[int, str | None, int, Any]], samples: list[dict[str, int]],
               cuts: tuple[int, int]) -> None:
        queue_rows = [{"queue_id": q, "step_ms": step, **p._asdict()} for q, g, step, p in pending if g is None]
        group_rows = [{"queue_id": q, "group_name": g, "step_ms": step, **p._asdict()}
                      for q, g, step, p in pending if g is not None]
        meta = self.broker.meta
        meta.save_history(queue_rows, group_rows, samples)
        meta.prune_history(cuts[0], cuts[1], self.coarse_ms, *self._cuts)

    # ------------------------------------------------------------------ reading

    def _points(self, series: _Series | None, since: int = 0) -> list[Any]:
        """A series' fine points in memory from `since`: its ring, then its newest point again at the
        instants sampled since (while it was settled)."""
        if series is None or not series.ring or not self._instants:
            return []
        since = max(since, self._instants[0])
        last = series.ring[-1]
        carried = []
        for t in reversed(self._instants):
            if t <= last.t or t < since:
                break
            carried.append(last._replace(t=t))
        kept = []
        for p in reversed(series.ring):
            if p.t < since:
                break
            kept.append(p)
        return kept[::-1] + carried[::-1]

    def clearing(self, queue_id: int, group: str) -> Clearing:
        """The group's lag trend and time to clear as of its newest sample (app/broker/clearing.py)."""
        series = self._groups.get((queue_id, group))
        return series.clearing if series is not None else UNKNOWN

    def floor_moved_at(self, queue: str, group: str) -> int | None:
        """Epoch ms when the group's ack floor last moved (to sampling precision; across restarts),
        or None before the group's first sample. For the `stalled` alert: lag > 0 and this is old."""
        q = self.broker.queues.get(queue)
        series = self._groups.get((q.id, group)) if q is not None else None
        return series.floor_moved_at if series is not None and series.floor_moved_at else None

    def queue_points(self, queue: str, since: int = 0) -> list[QueuePoint]:
        """The queue's fine points in memory (the last CHUNKMQ_HISTORY_MEMORY_SECONDS) from `since`."""
        q = self.broker.queues.get(queue)
        return self._points(self._queues.get(q.id) if q is not None else None, since)

    def group_points(self, queue: str, group: str, since: int = 0) -> list[GroupPoint]:
        """The group's fine points in memory from `since`, as queue_points."""
        q = self.broker.queues.get(queue)
        return self._points(self._groups.get((q.id, group)) if q is not None else None, since)

    async def stored_totals(self, since: int, until: int) -> list[QueuePoint]:
        """Every queue's stored fine points summed per instant in [since, until), oldest first (the
        overview's charts); what is newer than the last write is only in memory (`queue_points`)."""
        def load() -> tuple[list[tuple[Any, ...]], list[int]]:
            meta = self.broker.meta
            return (meta.queue_history_all(self.step_ms, since, until),
                    meta.history_samples(self.step_ms, since, until))

        rows, instants = await asyncio.to_thread(load)
        start = max(since, now_ms() - self.fine_keep_ms)
        times = sorted({t for t in instants if start <= t < until} | {r[1] for r in rows if start <= r[1] < until})
        held: dict[int, tuple[float, ...]] = {}  # each queue's values at the time summed
        sums = [0.0] * (len(QueuePoint._fields) - 1)
        out: list[QueuePoint] = []
        i = 0
        for t in times:
            while i < len(rows) and rows[i][1] <= t:
                queue_id, _, *values = rows[i]
                for k, (new, old) in enumerate(zip(values, held.get(queue_id, (0.0,) * len(sums)), strict=True)):
                    sums[k] += new - old
                held[queue_id] = tuple(values)
                i += 1
            if held:
                out.append(QueuePoint(t, *(round(v, 6) for v in sums)))
        return out

    async def queue_series(self, queue: Keyed, since: int | None, step: float | None) -> Series:
        """The queue's points from `since` (default: the last hour), at `step` seconds or finer, from
        memory and the database."""
        def load(step_ms: int, start: int, end: int) -> tuple[list[QueuePoint], list[int]]:
            meta = self.broker.meta
            return ([QueuePoint(*row) for row in meta.queue_history(queue.id, step_ms, start, end)],
                    meta.history_samples(step_ms, start, end))

        return await self._read(self._queues.get(queue.id), (queue.id, None), since, step, load)

    async def group_series(self, queue: Keyed, group: str, since: int | None, step: float | None) -> Series:
        def load(step_ms: int, start: int, end: int) -> tuple[list[GroupPoint], list[int]]:
            meta = self.broker.meta
            return ([GroupPoint(*row) for row in meta.group_history(queue.id, group, step_ms, start, end)],
                    meta.history_samples(step_ms, start, end))

        return await self._read(self._groups.get((queue.id, group)), (queue.id, group), since, step, load)

    async def _read(
        self, series: _Series | None, key: tuple[int, str | None], since: int | None, step: float | None,
        load: Callable[[int, int, int], tuple[list[Any], list[int]]],
    ) -> Series:
        now = now_ms()
        since = now - 3_600_000 if since is None else since
        wanted = None if step is None else max(1, round(step * 1000))
        fine = since >= now - self.fine_keep_ms and (wanted is None or wanted < self.coarse_ms)
        resolution = self.step_ms if fine else self.coarse_ms
        # what retention has cut is not served, though a series' newest row before the cut is kept
        start = max(since, now - (self.fine_keep_ms if fine else self.coarse_keep_ms))
        unwritten = [x["t"] for x in self._samples if x["step_ms"] == resolution]
        points: dict[int, Any] = {}
        if fine:
            memory = self._points(series)
            first = memory[0].t if memory else now + 1
            if since < first:  # older than memory holds, or sampled before a restart
                rows, instants = await asyncio.to_thread(load, resolution, since, first)
                points.update((p.t, p) for p in fill_forward(rows, instants + unwritten, start, first))
            points.update((p.t, p) for p in memory if p.t >= since)
        else:
            rows, instants = await asyncio.to_thread(load, resolution, since, now + 1)
            rows += [p for q, g, s, p in self._pending if (q, g) == key and s == resolution]
            rows.sort(key=lambda p: p.t)
            points.update((p.t, p) for p in fill_forward(rows, instants + unwritten, start, now + 1))
            if (series is not None and series.filling and series.bucket == self._bucket
                    and series.bucket + resolution > since):
                partial = _aggregate(type(series.filling[0]), series.filling)
                points[partial.t] = partial
        out = [points[t] for t in sorted(points)]
        if wanted is not None and wanted > resolution:
            out, resolution = downsample(out, wanted), wanted
        return Series(resolution, since, out)


def _steady(series: _Series) -> bool:
    """Whether a series' newest fine row holds its newest point's values, and so does every point of
    the coarse bucket being filled."""
    values = tuple(series.ring[-1][1:])
    return series.fine_row == values and all(tuple(p[1:]) == values for p in series.filling)
