"""Reading queues: offset ranges planned on the driver, read as Arrow pages in the executors."""

from __future__ import annotations

import http.client
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from chunkmq.spark.errors import DataLoss, ReadFailed
from chunkmq.spark.http import ARROW_PAGE, ChunkmqError, Pages, connect
from chunkmq.spark.options import SourceOptions
from chunkmq.spark.prefetch import prefetched
from chunkmq.wire import codes

log = logging.getLogger("chunkmq.spark")


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Offsets [start, end) of one queue: one Spark task."""

    queue: str
    start: int
    end: int


PREFETCH = 2  # pages a read task fetches ahead of what Spark has taken
TASK_ROWS = 100_000  # without minPartitions, a read is split across the cores in tasks of at least this


def cores() -> int:
    """The cores this process may run on (the planning machine's: the driver's or Connect server's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan(ranges: dict[str, tuple[int, int]], min_partitions: int | None, max_per_partition: int) -> list[QueueRange]:
    """Split each queue's range in pieces of at most ``max_per_partition`` offsets, and into at least
    ``min_partitions`` pieces in all (shared in proportion to the ranges' sizes). Without
    ``min_partitions``: one piece per core, as long as each holds ``TASK_ROWS`` offsets or more."""
    total = sum(max(0, e - s) for s, e in ranges.values())
    if min_partitions is None:
        min_partitions = max(1, min(cores(), total // TASK_ROWS))
    parts: list[QueueRange] = []
    for queue, (start, end) in ranges.items():
        size = end - start
        if size <= 0:
            continue
        pieces = max(math.ceil(size / max_per_partition), math.ceil(min_partitions * size / total))
        step = math.ceil(size / pieces)
        parts.extend(QueueRange(queue, s, min(s + step, end)) for s in range(start, end, step))
    return parts


def lost(message: str, fail: bool) -> None:
    if fail:
        raise DataLoss(f"{message}; set failOnDataLoss=false to skip lost messages")
    log.warning("%s: skipped (failOnDataLoss=false)", message)


def checked_ranges(opts: SourceOptions, start: dict[str, int], end: dict[str, int],
                   queues: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """[start, end) per queue, with offsets below a queue's floor reported as data loss."""
    ranges: dict[str, tuple[int, int]] = {}
    for name, stop in end.items():
        begin = start.get(name)
        info = queues.get(name)
        if info is None:
            lost(f"queue {name!r} no longer exists", opts.fail_on_data_loss)
            continue
        if begin is None:  # a queue that appeared after the query started (subscribePattern)
            begin = info["first_offset"]
        if begin < info["first_offset"] and begin < stop:
            lost(f"queue {name!r}: offsets {begin}..{min(stop, info['first_offset']) - 1} are gone "
                 f"(the queue now starts at {info['first_offset']})", opts.fail_on_data_loss)
            begin = min(info["first_offset"], stop)
        ranges[name] = (begin, stop)
    return ranges


def pages(opts: SourceOptions, part: QueueRange) -> Iterator[tuple[bytes, int]]:
    """The Arrow pages of one range and the offset after each: the page's last offset + 1, or where
    the queue's messages resume after a gap (the broker's X-Next-Offset)."""
    fetch = Pages(opts.url, opts.token)
    try:
        offset = part.start
        while offset < part.end:
            page, next_offset = fetch.arrow_page(part.queue, offset, min(ARROW_PAGE, part.end - offset))
            yield page, next_offset
            if next_offset <= offset:
                return  # nothing at or after offset: the range ends past the queue's end
            offset = next_offset
    finally:
        fetch.close()


def read_range(opts: SourceOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range as Arrow record batches (runs in an executor), the next pages
    fetched while Spark takes the current one."""
    offset = part.start
    try:
        for page, next_offset in prefetched(pages(opts, part), PREFETCH):
            rows = 0
            for batch in pa.ipc.open_stream(page):
                if not batch.num_rows:
                    continue
                offsets = batch.column(1).to_numpy()
                if offsets[0] > offset:
                    lost(f"queue {part.queue!r}: offsets {offset}..{offsets[0] - 1} are gone", opts.fail_on_data_loss)
                keep = int(np.searchsorted(offsets, part.end))
                rows += keep
                if keep < batch.num_rows:
                    batch = batch.slice(0, keep)
                yield batch if opts.include_headers else batch.drop_columns(["headers"])
                offset = int(offsets[-1]) + 1
            if not rows and next_offset > offset:
                lost(f"queue {part.queue!r}: offsets {offset}..{min(next_offset, part.end) - 1} are gone",
                     opts.fail_on_data_loss)
                offset = next_offset
    except ChunkmqError as e:
        if e.code != codes.QUEUE_NOT_FOUND:
            raise _failed(opts, part, offset, e) from e
        lost(f"queue {part.queue!r} no longer exists", opts.fail_on_data_loss)
    except (OSError, http.client.HTTPException) as e:  # reset, refused, closed mid-answer, timed out
        raise _failed(opts, part, offset, e) from e


def _failed(opts: SourceOptions, part: QueueRange, offset: int, e: Exception) -> ReadFailed:
    return ReadFailed(f"reading queue {part.queue!r} offsets {part.start}..{part.end - 1} from the broker at "
                      f"{opts.url} failed at offset {offset}: {type(e).__name__}: {e}")


class BatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRange]:  # type: ignore[override]
        with connect(self.opts.url, self.opts.token) as api:
            queues = self.opts.queues(api)
            start = self.opts.start_offsets(api, queues)
            end = self.opts.end_offsets(queues)
            ranges = checked_ranges(self.opts, start, end, queues)
        return plan(ranges, self.opts.min_partitions, self.opts.max_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, QueueRange)
        return read_range(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are a JSON map queue -> next offset to read; Spark's checkpoint keeps them."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.target: dict[str, int] | None = None  # Trigger.AvailableNow's end
        self.followed: dict[str, int] = {}  # where the `group` option's group was moved last

    def _queues(self) -> dict[str, dict[str, Any]]:
        with connect(self.opts.url, self.opts.token) as api:
            return self.opts.queues(api, strict=False)

    def initialOffset(self) -> dict[str, int]:
        with connect(self.opts.url, self.opts.token) as api:
            return self.opts.start_offsets(api, self.opts.queues(api))

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {name: q["next_offset"] for name, q in self._queues().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        mx = self.opts.max_per_trigger
        return ReadMaxRows(mx) if mx else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # type: ignore[override]
        # Spark asks for the next batch once the previous one is committed to the sink and to its
        # commit log, starting where that batch ended: that is the query's position now. It asks
        # once more after the last batch (the query then finds nothing new and stops), so a
        # finished query leaves its group with no lag.
        self._follow(start)
        queues = self._queues()
        latest = {name: q["next_offset"] for name, q in queues.items()}
        if self.target is not None:
            latest = {name: min(v, self.target[name]) for name, v in latest.items() if name in self.target}
        begin = {name: max(start.get(name, q["first_offset"]), q["first_offset"]) for name, q in queues.items()
                 if name in latest}
        end = {name: max(begin[name], latest[name]) for name in latest}
        if isinstance(limit, ReadMaxRows):
            end = _capped(begin, end, limit.max_rows)
        # queues that went away keep their offset, so partitions() can report them
        return {**{k: v for k, v in start.items() if k not in end}, **end}

    def reportLatestOffset(self) -> dict[str, int]:
        return {name: q["next_offset"] for name, q in self._queues().items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[QueueRange]:  # type: ignore[override]
        with connect(self.opts.url, self.opts.token) as api:
            queues = {q["name"]: q for q in api.queues()}
        wanted = {k: v for k, v in end.items() if v > start.get(k, -1) or k not in queues}
        ranges = checked_ranges(self.opts, start, wanted, queues)
        return plan(ranges, self.opts.min_partitions, self.opts.max_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, QueueRange)
        return read_range(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Spark's word that a batch ending at `end` is committed (said when it plans the next one)."""
        self._follow(end)

    def _follow(self, position: dict[str, int]) -> None:
        """Move the `group` option's consumer group to what the query has committed (the console then
        shows the job's progress and lag alerts cover it). Spark's checkpoint stays the truth."""
        if not self.opts.group:
            return
        moves = {q: o for q, o in position.items() if self.followed.get(q) != o}
        if not moves:
            return
        with connect(self.opts.url, self.opts.token) as api:
            for queue, offset in moves.items():
                try:
                    api.move_group(queue, self.opts.group, offset)
                    self.followed[queue] = offset
                except ChunkmqError as e:
                    log.warning("could not move group %r of queue %r to %d: %s", self.opts.group, queue, offset, e)


def _capped(begin: dict[str, int], end: dict[str, int], max_rows: int) -> dict[str, int]:
    """At most ``max_rows`` offsets in all, shared in proportion to each queue's backlog (as Kafka does)."""
    backlog = {k: end[k] - begin[k] for k in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return end
    capped = {k: begin[k] + backlog[k] * max_rows // total for k in end}
    short = max_rows - sum(capped[k] - begin[k] for k in end)
    for k in end:  # hand out what rounding down left, so every trigger makes progress
        extra = min(short, end[k] - capped[k])
        capped[k] += extra
        short -= extra
    return capped
