"""Delayed delivery: a message published with `delay_ms` or `deliver_at_ms` reaches its queues when due.

How (the design is also in docs/decisions.md):

- At publish the message is written to the log at once, durably under the fsync mode like any
  other, as one record with the caller flag FLAG_DELAYED and no queue placement. Its data is
  ``u64 due ms, u16 n, n x u32 queue id`` (little-endian) before the usual stored blob: what a
  recovery needs to rebuild the schedule from the log alone. Each target queue's due index
  (app/storage/due_index.py) gets a (due, position) entry.
- When due, the broker appends a copy of the blob into each target queue with a new offset. So a
  group sees a delayed message after every message published to the queue before its due time, and
  before those published after it; a not-yet-due message has no offset: no group's next offset,
  in-flight set or ack floor ever holds it, so it cannot block a floor nor be passed by one. After
  its copy, redelivery, acks, dead-lettering and limits treat it like any message.
- The log from the oldest pending delayed record on is kept by retention and the collector
  (Store.pinned_from), since no queue entry keeps it.
- `flush` (every 200 ms) makes the entries durable and records, per queue, the log position
  indexed and the due time up to which copies are durable in the log. A restart replays the log
  past the first, and delivers again what was due after the second (at-least-once).

The event loop owns the schedule; nothing here runs SQL.
"""

from __future__ import annotations

import logging
import shutil
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chunkmq.broker.errors import InvalidInput
from chunkmq.storage import DueIndex, Store

log = logging.getLogger("chunkmq.broker")

FLAG_DELAYED = 8  # bit 3 of the caller's flags: a record held for later delivery, its data the schedule's prefix
DELAY_FIELDS = ("delay_ms", "deliver_at_ms")
MAX_DELAY_MS = 7 * 24 * 3600 * 1000  # 7 days
_HEAD = struct.Struct("<QH")
_QUEUE = struct.Struct("<I")


def encode_delayed(due_ms: int, queue_ids: Iterable[int], blob: bytes) -> bytes:
    ids = tuple(queue_ids)
    return _HEAD.pack(due_ms, len(ids)) + b"".join(_QUEUE.pack(q) for q in ids) + blob


def decode_delayed(data: bytes) -> tuple[int, tuple[int, ...], bytes]:
    """(due ms, queue ids, blob) of a delayed record's data."""
    due, n = _HEAD.unpack_from(data)
    start = _HEAD.size + n * _QUEUE.size
    ids = struct.unpack_from(f"<{n}I", data, _HEAD.size)
    return due, ids, data[start:]


def has_delay(raw: list[Any]) -> bool:
    """Whether any message object of a JSON batch asks for a delay."""
    return any(type(m) is dict and ("delay_ms" in m or "deliver_at_ms" in m) for m in raw)


def parse_delay(message: Mapping[str, Any], index: int, now_ms: int) -> int | None:
    """The due time (epoch ms) a message object asks for, or None; InvalidInput naming the field."""
    has_delay, has_at = "delay_ms" in message, "deliver_at_ms" in message
    if not has_delay and not has_at:
        return None
    if has_delay and has_at:
        raise InvalidInput(f"messages[{index}]: give delay_ms or deliver_at_ms, not both")
    if has_delay:
        delay = message["delay_ms"]
        if type(delay) is not int or not 0 <= delay <= MAX_DELAY_MS:
            raise InvalidInput(f"messages[{index}].delay_ms must be an integer from 0 to {MAX_DELAY_MS}")
        return now_ms + delay
    at = message["deliver_at_ms"]
    if type(at) is not int or not 0 <= at <= now_ms + MAX_DELAY_MS:
        raise InvalidInput(
            f"messages[{index}].deliver_at_ms must be epoch milliseconds, at most {MAX_DELAY_MS} ms from now")
    return at


class Schedule:
    """Every queue's due index, under `directory` (one subdirectory per queue id)."""

    def __init__(self, directory: Path, store: Store) -> None:
        self.directory = directory
        self.store = store
        self.indexes: dict[int, DueIndex] = {}

    @classmethod
    def open(cls, directory: Path, store: Store) -> Schedule:
        """Open every queue's index and replay the log past the oldest of their checkpoints."""
        schedule = cls(directory, store)
        if not directory.is_dir():
            return schedule
        end = store.end_position
        for path in sorted(directory.iterdir()):
            if path.is_dir() and path.name.isdigit():
                schedule.indexes[int(path.name)] = DueIndex.open(path, end)
        if schedule.indexes:
            start = min(i.scan_from for i in schedule.indexes.values())
            replayed = 0
            for record in store.scan(start):
                if record.flags & FLAG_DELAYED:
                    due, ids, _ = decode_delayed(record.data)
                    for q in ids:
                        index = schedule.indexes.get(q)
                        if index is not None and record.position >= index.scan_from:
                            index.add(due, record.position)
                            replayed += 1
            if replayed:
                log.info("schedule: %d delayed entries replayed from the log", replayed)
        schedule._pin()
        return schedule

    def add(self, queue_id: int, due_ms: int, position: int) -> None:
        index = self.indexes.get(queue_id)
        if index is None:
            index = self.indexes[queue_id] = DueIndex.create(self.directory / f"{queue_id:010d}", position)
        index.add(due_ms, position)
        if self.store.pinned_from is None or position < self.store.pinned_from:
            self.store.pinned_from = position

    def take_due(self, now_ms: int) -> dict[int, list[tuple[int, int]]]:
        """Per queue id, the (due, position) entries due by `now_ms`."""
        out: dict[int, list[tuple[int, int]]] = {}
        for q, index in self.indexes.items():
            if index.pending:
                due = index.take_due(now_ms)
                if due:
                    out[q] = due
        return out

    def next_due(self) -> int | None:
        dues = [d for i in self.indexes.values() if i.pending and (d := i.next_due()) is not None]
        return min(dues) if dues else None

    def scheduled(self, queue_id: int) -> tuple[int, int | None]:
        """(messages scheduled, next due time) of a queue."""
        index = self.indexes.get(queue_id)
        if index is None or not index.pending:
            return 0, None
        return index.pending, index.next_due()

    def peek(self, queue_id: int, count: int) -> list[tuple[int, int]]:
        index = self.indexes.get(queue_id)
        return index.peek(count) if index is not None and index.pending else []

    def watermarks(self) -> dict[int, int]:
        return {q: i.watermark for q, i in self.indexes.items()}

    def flush(self, log_position: int, watermarks: Mapping[int, int]) -> None:
        """Make every index durable up to `log_position`, with the watermarks taken before the
        deliveries up to them were made durable in the log."""
        for q, index in list(self.indexes.items()):
            # an index made since the watermarks were taken keeps its written one
            index.flush(log_position, watermarks.get(q, index.checkpointed_watermark))
        self._pin()

    def put_back(self, due: dict[int, list[tuple[int, int]]]) -> None:
        """Entries of `take_due` whose copies the log refused: pending again."""
        for q, entries in due.items():
            index = self.indexes.get(q)
            if index is not None:
                index.put_back(entries)
        self._pin()

    def forget(self, queue_id: int) -> None:
        """The queue is deleted: its scheduled messages go with it."""
        index = self.indexes.pop(queue_id, None)
        if index is not None:
            shutil.rmtree(index.directory, ignore_errors=True)
        self._pin()

    def _pin(self) -> None:
        pins = [p for i in self.indexes.values() if (p := i.pinned_position()) is not None]
        self.store.pinned_from = min(pins) if pins else None
