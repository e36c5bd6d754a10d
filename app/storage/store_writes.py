"""The write path of a Store (the Writes part): append, publish_one, chunk roll, tail cache."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .chunk import Chunk
from .errors import BatchTooLarge, QueueCapReached, StorageError, UnknownQueue
from .model import AppendedBatch, BatchSpace, MessageColumns, NewMessage, QueueCap
from .queue_index import ENTRY_SIZE, QueueIndex, pack_entries, unpack_entries
from .record import VERSION
from .record_encode import encode_batch, encode_one
from .store_state import StoreState, now_ms


class _Offsets(dict[int, int]):
    """next offset per queue for one batch, fetched on first use (unknown ids raise)."""

    __slots__ = ("_queues",)

    def __init__(self, queues: dict[int, QueueIndex]) -> None:
        super().__init__()
        self._queues = queues

    def __missing__(self, queue_id: int) -> int:
        qi = self._queues.get(queue_id)
        if qi is None:
            raise UnknownQueue(queue_id)
        self[queue_id] = qi.next
        return qi.next


def _count(qi: QueueIndex, number: int, added: int) -> None:
    """A queue's bytes, and its live bytes in chunk `number` (the collector's), grow by `added`."""
    qi.bytes += added
    counts = qi.chunk_bytes
    counts[number] = counts.get(number, 0) + added


class Writes(StoreState):
    """The write path: a batch (append) or one record (publish_one) encoded into the active chunk,
    its index entries written, then the log's end moved past it; chunks roll when full.

    Invariants: positions only grow (a record never lands below end_position); a queue's next
    offset moves only after its entries and the record are written; a failed write undoes itself
    (nothing of it visible, now or after a restart). Thread-safe: every method takes the writer lock.
    """

    def publish_one(self, data: bytes, queue_id: int, cap: QueueCap | None = None,
                    admit: Callable[[BatchSpace], None] | None = None, flags: int = 0) -> tuple[int, int]:
        """`append` of one record (no tag or key) placed in one queue, a single-message publish's call:
        its position and its offset in the queue. The same record, checks and errors as `append`,
        without the per-batch structures (a third of an append's time for one record); what it does
        not handle itself (a new chunk, a record too large, an unknown queue) it leaves to `append`."""
        with self._lock:
            self.check_open()
            active, qi = self._active, self._queues.get(queue_id)
            if qi is None or active is None or active.sealed or active.version != VERSION:
                return self._publish_one_by_append(data, queue_id, cap, admit, flags)
            ts = now_ms()
            if ts < self._last_ts:
                ts = self._last_ts
            pos = self._write_position(active)
            buf, packed, added = encode_one(data, queue_id, ts, pos, qi.next, self.options.max_message_bytes,
                                            self._tags, flags)
            size = len(buf)
            local = pos - active.base
            if size > self.options.max_batch_bytes or local + size > self._size:
                return self._publish_one_by_append(data, queue_id, cap, admit, flags)
            if cap is not None:
                self._check_caps({queue_id: cap}, {queue_id: (packed, added)})
            if admit is not None:
                admit(BatchSpace(size, False, len(packed) // ENTRY_SIZE, 1))
            active.write(local, buf)  # raises StorageFull after undoing its partial write
            try:
                qi.write_packed(qi.next, packed)
            except StorageError:
                active.rollback(local, local + size)
                raise
            for ids in self._changed_sets:
                ids.add(queue_id)
            offset = qi.next
            qi.next = offset + 1
            _count(qi, active.number, added)
            self._written(active, pos, local, buf, ts, 1)
        return pos, offset

    def _publish_one_by_append(self, data: bytes, queue_id: int, cap: QueueCap | None,
                               admit: Callable[[BatchSpace], None] | None, flags: int) -> tuple[int, int]:
        batch = MessageColumns([data], [(queue_id,)], flags=[flags] if flags else None)
        appended = self.append(batch, {queue_id: cap} if cap else None, admit)
        return appended.positions[0], appended.offsets[0]

    def append(self, batch: MessageColumns | Sequence[NewMessage], caps: Mapping[int, QueueCap] | None = None,
               admit: Callable[[BatchSpace], None] | None = None) -> AppendedBatch:
        """Store a batch with one write into one chunk; atomic across crashes.

        ``caps`` limits what queues may hold after it (QueueCapReached, with the records' exact sizes);
        ``admit`` is shown the space the batch takes (BatchSpace) before anything is written, and
        refuses it by raising. Raises MessageTooLarge / BatchTooLarge / UnknownQueue /
        QueueCapReached (nothing written), StorageFull on ENOSPC or EFBIG (nothing of the batch
        visible, now or after a restart), StoreClosed.
        """
        if not len(batch):
            return AppendedBatch(0, [], [], [])
        opts = self.options
        with self._lock:
            self.check_open()
            active = self._active
            ts = now_ms()
            if ts < self._last_ts:
                ts = self._last_ts
            pos = self._write_position(active)
            offsets = _Offsets(self._queues)
            buf, appended, entries = encode_batch(batch, ts, pos, offsets, opts.max_message_bytes, self._tags)
            size = len(buf)
            if size > opts.max_batch_bytes or size > self._size:
                raise BatchTooLarge(
                    f"batch of {size} encoded bytes exceeds max_batch_bytes={opts.max_batch_bytes} "
                    f"or chunk_size={self._size}"
                )
            local = pos - active.base if active is not None else 0
            new_chunk = active is None or active.sealed or active.version != VERSION or local + size > self._size
            if caps:
                self._check_caps(caps, entries)
            if admit is not None:
                placements = sum(len(packed) for packed, _ in entries.values()) // ENTRY_SIZE
                admit(BatchSpace(size, new_chunk, placements, len(entries)))
            if new_chunk:
                active = self._roll()
                delta = active.base - pos
                pos, local = active.base, 0
                appended.positions = [p + delta for p in appended.positions]
                for q, (packed, added) in entries.items():
                    flat = unpack_entries(packed)
                    flat[0::2] = [p + delta for p in flat[0::2]]
                    entries[q] = pack_entries(flat), added
            assert active is not None  # new_chunk when there was none
            active.write(local, buf)  # raises StorageFull after undoing its partial write
            try:
                for q, (packed, _) in entries.items():
                    qi = self._queues[q]
                    qi.write_packed(qi.next, packed)
            except StorageError:
                active.rollback(local, local + size)  # entries past a queue's end are never read; recovery zeroes them
                raise
            number = active.number
            for ids in self._changed_sets:
                ids.update(entries)
            for q, (_, added) in entries.items():
                qi = self._queues[q]
                qi.next = offsets[q]
                _count(qi, number, added)
            self._written(active, pos, local, buf, ts, len(batch))
        return appended

    def _write_position(self, active: Chunk | None) -> int:
        """Where the next record goes: the log's end, or the active chunk's start when the append that
        rolled to it wrote nothing (its write failed, a full disk): the end then still lies in the
        sealed chunk before it."""
        return self._end if active is None else max(self._end, active.base)

    def _written(self, active: Chunk, pos: int, local: int, buf: bytes, ts: int, records: int) -> None:
        """After `records` records (`buf`, at `pos`) and their index entries are written (writer lock
        held): the active chunk's statistics and the log's end move past them, and the tail cache
        keeps them for the readers that follow the end."""
        if not active.records:
            active.first_ts = ts
        active.records += records
        active.data_bytes = local + len(buf)
        active.last_ts = ts
        self._last_ts = ts
        self._end = pos + len(buf)
        self._dirty.add(active)
        self._cache(pos, buf)

    def _check_caps(self, caps: Mapping[int, QueueCap], entries: dict[int, tuple[bytes, int]]) -> None:
        for q, (packed, added) in entries.items():
            cap = caps.get(q)
            if cap is None:
                continue
            qi = self._queues[q]
            held = qi.next - qi.first
            if cap.max_messages is not None and held + len(packed) // ENTRY_SIZE > cap.max_messages:
                raise QueueCapReached(q, held, cap.max_messages, "messages")
            if cap.max_bytes is not None and qi.bytes + added > cap.max_bytes:
                raise QueueCapReached(q, qi.bytes, cap.max_bytes, "bytes")

    def _cache(self, pos: int, buf: bytes) -> None:
        limit = self.options.tail_cache_bytes
        if limit <= 0:
            return
        tail = self._tail
        tail.append((pos, buf))
        self._tail_bytes += len(buf)
        if self._tail_bytes > limit:
            # Cut an eighth below the limit: the copy below is of the whole list (tens of thousands of
            # entries when batches are single messages), so it runs once per eighth, not per append.
            keep = limit - limit // 8
            cut = 0
            while self._tail_bytes > keep and cut < len(tail) - 1:
                self._tail_bytes -= len(tail[cut][1])
                cut += 1
            # replace, never shrink in place: readers may be bisecting the old list
            self._tail = tail[cut:]

    def _roll(self) -> Chunk:
        """Seal the active chunk and start the next one (writer lock held)."""
        old = self._active
        now = now_ms()
        if old is not None and not old.sealed:
            old.seal(now)
            self._dirty.add(old)
            self.floors_changed = True  # a newly sealed chunk may already be unneeded
        number = self._next_number if old is None else old.number + 1
        new = Chunk.create(self.root, number, self._size, now)
        self.chunks_created += 1
        self._chunks[new.number] = new
        self._active = new
        return new
