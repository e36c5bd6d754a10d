"""The Store: one global message log in chunk files plus one index per queue.

Thread-safety: one writer at a time (append, create_queue, delete_queue, set_first_offset, retain
take the internal lock, so several threads may call them); readers (read, read_matching, read_at,
index_entries, scan, ...) run concurrently without the lock. The flusher thread fsyncs the log
(group commit) and writes the recovery point.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

from . import checkpoint, files
from .chunk import FOOTER_SIZE as CHUNK_FOOTER
from .chunk import HEADER_SIZE as CHUNK_HEADER
from .chunk import Chunk
from .errors import BatchTooLarge, CorruptChunk, QueueCapReached, StorageError, StoreClosed, UnknownQueue
from .errors import os_failure as _fail
from .flusher import Done, Flusher
from .gc import Collector, collect
from .model import (
    AppendedBatch,
    BatchSpace,
    ChunkInfo,
    ChunkState,
    ColumnPage,
    FsyncMode,
    GcReport,
    IndexEntry,
    MessageColumns,
    NewMessage,
    QueueCap,
    Record,
    RecoveryReport,
    RetentionReport,
    StoredMessage,
    StoreOptions,
)
from .queue_index import (
    ENTRY,
    ENTRY_DTYPE,
    ENTRY_SIZE,
    QueueIndex,
    index_file_size,
    pack_entries,
    unpack_entries,
)
from .record import (
    VERSION,
    decode,
    fields_at,
    iter_records,
    read_run,
    record_length,
    timestamp_at,
)
from .record_columns import columns as record_columns
from .record_encode import encode_batch, encode_one
from .recovery import recover
from .retention import retain

if TYPE_CHECKING:
    import asyncio

    from .tier import RemoteChunk

log = logging.getLogger("chunkmq.storage")

_iter_entries = ENTRY.iter_unpack
_tail_start_key = itemgetter(0)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# The future of an append in INTERVAL and NEVER modes: completed, shared (one per append cost a
# Condition and a lock each, on every single-message publish).
_DONE: Future[None] = Future()
_DONE.set_result(None)


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


class Store:
    """A message log with per-queue offset indexes. Open with Store.open(directory, options).

    The modules that work on a store's state from outside this file (recovery.py, retention.py,
    gc.py) use only its internal interface, internals.StoreInternals (a Protocol), never the
    private attributes.
    """

    recovery: RecoveryReport

    def __init__(self, root: Path, options: StoreOptions) -> None:
        self.root = root
        self.options = options
        self._size = options.chunk_size
        self._lock = threading.RLock()  # the writer lock
        self._flush_lock = threading.Lock()
        self._always = options.fsync is FsyncMode.ALWAYS  # a publish waits for an fsync
        self._closed = False
        self._chunks: dict[int, Chunk] = {}
        self._active: Chunk | None = None  # the chunk appends go to; None or sealed: roll first
        self._next_number = 0  # chunk number to create when there is no active chunk
        self.chunks_created = 0  # chunk files created since open (the disk budget's estimate)
        self._queues: dict[int, QueueIndex] = {}
        self._end = 0
        self._last_ts = 0
        self._dirty: set[Chunk] = set()
        self._tail: list[tuple[int, bytes]] = []  # recent batches (start position, bytes)
        self._tail_bytes = 0
        self._tags: dict[bytes, int] = {}
        self._collector: Collector | None = None
        # Tiered storage: chunks evicted to the bucket (by each number they stand for), and how to
        # fetch one back (set by the tier; None: nothing fetches, their entries read as gone).
        self._remote: dict[int, RemoteChunk] = {}
        self.fetcher: Callable[[str, int], bytes] | None = None
        self._fetch_lock = threading.Lock()
        self._dropped_remote: list[RemoteChunk] = []  # evicted chunks retention dropped (take_dropped_remote)
        # Queues whose counters or index files changed, per reader of them (changed_queues): the
        # checkpoint's own, and the broker's rounds. What each round does is what changed since its last.
        self._changed: dict[str, set[int]] = {"checkpoint": set()}
        self._changed_sets: list[set[int]] = list(self._changed.values())
        self._checkpoint = checkpoint.Writer(root)
        self._checkpointed: tuple[int, int, int] | None = None  # (position, records, first_ts) last written
        self.floors_changed = True  # something retention's chunk check depends on moved (retention.py)
        # The log from this position on is kept whatever the queues' floors: delayed records that are
        # not due yet have no queue entry to keep them (due_index.py). Set by the owner of the indexes.
        self.pinned_from: int | None = None
        self.punch_due: set[int] = set()  # queues whose first offset moved: retention trims their index files
        self._measure_lock = threading.Lock()
        self._index_bytes: dict[int, int] = {}  # queue id -> bytes of its index files when last measured
        self._index_total = 0
        self._held: dict[int, tuple[int, int]] = {}  # queue id -> (messages, bytes) when last counted
        self._held_total = (0, 0)
        self._flusher = Flusher(
            options.fsync,
            options.fsync_interval_ms / 1000,
            options.checkpoint_interval_ms / 1000,
            self._sync_log,
            self.flush,
        )

    # ------------------------------------------------------------------ life cycle
    @classmethod
    def open(cls, directory: Path, options: StoreOptions = StoreOptions()) -> Store:
        """Open (or create) a store in ``directory`` and run recovery (see recovery.py)."""
        if options.chunk_size < 4096 or options.index_chunk_entries < 1:
            raise ValueError("chunk_size must be >= 4096 and index_chunk_entries >= 1")
        if options.max_batch_bytes >= 1 << 32 or options.max_message_bytes >= (1 << 32) - 1024:
            raise ValueError("max_batch_bytes and max_message_bytes must stay below 4 GiB")
        root = Path(directory)
        for directory in (root, files.log_dir(root), files.queues_dir(root)):
            files.private_dir(directory)
        store = cls(root, options)
        store.recovery = recover(store)
        if any(files.log_dir(root).glob("*.remote")):  # chunks in a tier's bucket only (tier.py)
            from .tier import load_stubs

            store._remote = {n: r for n, r in load_stubs(files.log_dir(root)).items() if n not in store._chunks}
        files.make_reserve(root)
        log.info("storage recovery: %s", store.recovery)
        store._flusher.start(store.end_position)
        if options.gc_threshold > 0:
            store._collector = Collector(store, options.gc_threshold, options.gc_duty)
            store._collector.start()
        return store

    def close(self) -> None:
        """Flush, stop the flusher thread, unmap and close every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._collector is not None:
            self._collector.stop()
        self._flusher.stop()
        try:
            self.flush()
        except StorageError:
            log.exception("final flush failed; recovery will replay the tail")
        finally:
            self._checkpoint.close()
            with self._lock:
                for c in self._chunks.values():
                    c.close()
                for qi in self._queues.values():
                    qi.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    # ------------------------------------------------------------------ queues
    def create_queue(self, queue_id: int) -> None:
        """Create the index of a queue (idempotent)."""
        if not 0 <= queue_id <= 0xFFFFFFFF:
            raise ValueError(f"queue id must be a u32, got {queue_id}")
        with self._lock:
            self.check_open()
            if queue_id in self._queues:
                return
            path = files.queue_dir(self.root, queue_id)
            path.mkdir(mode=files.DIR_MODE, parents=True, exist_ok=True)
            files.fsync_dir(path.parent)
            self._queues[queue_id] = QueueIndex(self.root, queue_id, self.options.index_chunk_entries)
            self.touch(queue_id)

    def delete_queue(self, queue_id: int) -> None:
        """Remove a queue's index files (idempotent); its log data becomes garbage for retain()."""
        with self._lock:
            self.check_open()
            qi = self._queues.pop(queue_id, None)
            if qi is None:
                return
            qi.reset()
            path = files.queue_dir(self.root, queue_id)
            if path.is_dir():
                path.rmdir()
            files.fsync_dir(path.parent)
            self.touch(queue_id)
            self.floors_changed = True  # its records no longer keep chunks
        # The recovery point must move past this queue's records, so a re-created queue with the same
        # id never gets them replayed into its index.
        self.flush()

    def queue_ids(self) -> list[int]:
        return sorted(self._queues)

    def touch(self, queue_id: int) -> None:
        """Record that a queue's counters (first, next, bytes) or index files changed (writer lock held)."""
        for ids in self._changed_sets:
            ids.add(queue_id)

    def first_moved(self, queue_id: int) -> None:
        """A queue's first offset rose (writer lock held): its counters changed, and retention trims
        its index files."""
        self.touch(queue_id)
        self.punch_due.add(queue_id)

    def touch_all(self, queue_ids: set[int]) -> None:
        for ids in self._changed_sets:
            ids.update(queue_ids)

    def changed_queues(self, reader: str) -> set[int]:
        """The ids of the queues created, deleted, appended to, or whose first offset or index files
        changed since ``reader``'s previous call; every queue on its first call."""
        with self._lock:
            ids = self._changed.get(reader)
            self._changed[reader] = set()
            self._changed_sets = list(self._changed.values())
            return set(self._queues) if ids is None else ids

    def _queue(self, queue_id: int) -> QueueIndex:
        qi = self._queues.get(queue_id)
        if qi is None:
            raise UnknownQueue(queue_id)
        return qi

    def first_offset(self, queue_id: int) -> int:
        return self._queue(queue_id).first

    def next_offset(self, queue_id: int) -> int:
        return self._queue(queue_id).next

    def queue_bytes(self, queue_id: int) -> int:
        return self._queue(queue_id).bytes

    def index_files(self, queue_id: int) -> list[Path]:
        """The paths of a queue's index chunk files, lowest base offset first."""
        with self._lock:
            qi = self._queue(queue_id)
            return [qi.files[base].path for base in sorted(qi.files)]

    def set_first_offset(self, queue_id: int, offset: int, *, durable: bool = False) -> tuple[int, int]:
        """Move a queue's floor up (never down, at most to its end); returns (messages, bytes) dropped."""
        with self._lock:
            self.check_open()
            qi = self._queue(queue_id)
            new = min(max(offset, qi.first), qi.next)
            dropped = new - qi.first
            freed = qi.bytes_between(qi.first, new) if dropped else 0
            qi.raise_floor(new, self._size)
            qi.first = new
            qi.bytes -= freed
            if dropped:
                self.first_moved(queue_id)
                self.floors_changed = True
        if durable and dropped:
            self.flush()
        return dropped, freed

    # ------------------------------------------------------------------ write path
    @property
    def end_position(self) -> int:
        """Global position after the last appended record."""
        return self._end

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
            ts = _now_ms()
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
            ts = _now_ms()
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
        now = _now_ms()
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

    def durable(self, position: int) -> Future[None]:
        """A future resolved once everything below ``position`` is fsynced.

        ALWAYS: group commit by the flusher thread. INTERVAL / NEVER: already completed.
        """
        return self._flusher.durable(position) if self._always else _DONE

    def when_durable(self, position: int, loop: asyncio.AbstractEventLoop, done: Done) -> bool:
        """`durable` for a waiter on an event loop: `done` is called in `loop` once everything below
        ``position`` is fsynced (with the fsync's error, or None), together with every other waiter
        that fsync ends there. False, and nothing called, when there is nothing to wait for (fsync=interval
        or never, or fsynced already)."""
        return self._always and self._flusher.when_durable(position, loop, done)

    def sync(self, position: int) -> Future[None]:
        """A future resolved once everything below ``position`` is fsynced, in every mode: an fsync
        is forced if none covers it yet (the group-state writer calls this before saving positions)."""
        return self._flusher.durable(position)

    def _sync_log(self) -> int:
        with self._lock:
            target = self._end
            dirty = list(self._dirty)
            self._dirty.clear()
        try:
            for c in dirty:
                c.sync()
        except OSError:
            with self._lock:
                self._dirty.update(dirty)
            raise
        with self._lock:
            for c in dirty:
                if c.sealed and not c.closed and c not in self._dirty:
                    c.release_fd()
        return target

    def flush(self) -> None:
        """fsync the log and every index, then write the recovery point."""
        with self._flush_lock:  # recovery points are written in the order of their snapshots
            self._flush()

    def _flush(self) -> None:
        """A recovery point costs what changed since the last one: the indexes of the queues that
        changed are fsynced and their counters appended to the checkpoint's journal; a full
        checkpoint only when checkpoint.Writer asks for one; nothing when nothing changed."""
        writer = self._checkpoint
        with self._lock:
            position = self._end
            active = self._active
            if active is not None and active.base + active.data_bytes == position:
                records, first_ts = active.records, active.first_ts
            else:
                records, first_ts = 0, 0
            changed = self._changed["checkpoint"]
            full = writer.wants_full()
            if not full and not changed and self._checkpointed == (position, records, first_ts):
                return
            self._changed["checkpoint"] = set()
            self._changed_sets = list(self._changed.values())
            if full:
                queues = {q: (qi.first, qi.next, qi.bytes) for q, qi in self._queues.items()}
                indexes = list(self._queues.values())
            else:
                indexes = [qi for q in changed if (qi := self._queues.get(q)) is not None]
                queues = {q: (0, 0, 0) for q in changed}
                queues.update((qi.queue_id, (qi.first, qi.next, qi.bytes)) for qi in indexes)
        try:
            self._sync_log()
            for qi in indexes:
                try:
                    qi.sync()
                except (OSError, ValueError):
                    pass  # deleted meanwhile: nothing to make durable
            with self._lock:
                for qi in indexes:
                    qi.release_old_fds()
            cp = checkpoint.Checkpoint(position, records, first_ts, _now_ms(), queues)
            try:
                if full:
                    writer.write_full(cp)
                else:
                    writer.append(cp)
            except OSError as exc:
                raise _fail(exc, "writing the checkpoint") from exc
        except BaseException:
            with self._lock:  # the next recovery point covers them again
                self.touch_all(changed)
            raise
        self._checkpointed = (position, records, first_ts)

    # ------------------------------------------------------------------ read path
    def _source(self, pos: int) -> tuple[bytes | object, int, Chunk | None, bool]:
        """Where the record at ``pos`` can be read: (buffer, offset in it, chunk, from cache)."""
        tail = self._tail
        if tail and pos >= tail[0][0]:
            i = bisect_right(tail, pos, key=_tail_start_key) - 1
            start, buf = tail[i]
            if pos - start < len(buf):
                return buf, pos - start, self._chunks.get(pos // self._size), True
        c = self._chunks.get(pos // self._size)
        if c is None:
            c = self._fetched(pos // self._size)
            if c is None:
                return None, 0, None, False
        if c.moved_positions is None:
            return c.mm, pos - c.base + CHUNK_HEADER, c, False
        local = c.local_of(pos)  # a rewritten chunk: its moved table says where the record is now
        if local < 0:
            return None, 0, None, False
        return c.mm, local + CHUNK_HEADER, c, False

    def read(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int | None = None,
        tag_hashes: frozenset[int] | None = None,
    ) -> list[StoredMessage]:
        """Messages at offsets >= max(offset, first_offset), in order, up to max_count (and max_bytes
        of data, at least one). With tag_hashes, other tags are skipped (see read_matching)."""
        return self._read(queue_id, offset, max_count, max_bytes, tag_hashes, 100_000)[0]

    def read_matching(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_hashes: frozenset[int],
        *,
        max_bytes: int | None = None,
        max_scan: int = 100_000,
    ) -> tuple[list[StoredMessage], int]:
        """Messages whose tag hash is in ``tag_hashes``, and the offset after the last entry scanned."""
        return self._read(queue_id, offset, max_count, max_bytes, tag_hashes, max_scan)

    def _read(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int | None,
        tag_hashes: frozenset[int] | None,
        max_scan: int,
    ) -> tuple[list[StoredMessage], int]:
        self.check_open()
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, start + (max_scan if tag_hashes is not None else max_count))
        out: list[StoredMessage] = []
        if start >= end or max_count <= 0:
            return out, max(start, min(offset, qi.next))
        if tag_hashes is None and max_bytes is None:
            out = self._read_run(qi, start, end)
            while len(out) < max_count and end < qi.next:  # entries lost to a quarantine were skipped
                more = min(qi.next, end + max_count - len(out))
                out += self._read_run(qi, end, more)
                end = more
            return out, end
        return self._read_general(qi, start, end, max_count, max_bytes, tag_hashes)

    def _locate(self, pos: int) -> tuple[object, int, int, Chunk | None, bool]:
        """(buffer, delta, hi, chunk, cached): the record at global ``pos`` sits at buffer[pos + delta],
        and so does every position in [pos, hi)."""
        src, off, c, cached = self._source(pos)
        if src is None:
            return None, 0, 0, None, False
        if cached:
            return src, off - pos, pos + len(src) - off, c, True  # type: ignore[arg-type]
        if c is not None and c.moved_positions is not None:
            return src, off - pos, pos + 1, c, False  # moved records: one position at a time
        return src, off - pos, pos - pos % self._size + self._size, c, False

    def _read_run(self, qi: QueueIndex, start: int, end: int) -> list[StoredMessage]:
        """The hot read path: every entry of [start, end), no filter, no byte budget. Each run of
        entries one source serves (a chunk's mmap, or a cached batch) is decoded by record.read_run."""
        out: list[StoredMessage] = []
        verify = self.options.verify_reads
        entries = enumerate(_iter_entries(qi.raw(start, end - start)), start)
        pending = next(entries, None)
        cur: Chunk | None = None
        cached = False
        mark = 0
        try:
            while pending is not None:
                p1 = pending[1][0]
                if cur is not None:
                    self._count(cur, cached, len(out) - mark)
                    cur = None
                mark = len(out)
                if not p1:  # a hole (data lost to quarantine)
                    pending = next(entries, None)
                    continue
                src, delta, hi, cur, cached = self._locate(p1 - 1)
                if src is None:  # chunk deleted or quarantined: the entry is gone
                    pending = next(entries, None)
                    continue
                version = cur.version if cur is not None and not cached else VERSION
                # the tail cache holds the bytes we wrote: no CRC check for them
                pending = read_run(src, delta - 1, p1 - 1, hi, itertools.chain((pending,), entries), out,
                                   verify and not cached, version, self._size)
        except ValueError:
            pass  # a chunk closed under us by retention: what was read so far stands
        if cur is not None:
            self._count(cur, cached, len(out) - mark)
        return out

    def read_columns(self, queue_id: int, offset: int, max_count: int) -> ColumnPage:
        """Messages at offsets >= max(offset, first_offset), up to max_count, as columns (ColumnPage):
        what read() returns, without a Python object per message. The records are copied out of
        the log one span per chunk and parsed with numpy (record_columns.columns); records of format-1 chunks
        are decoded one by one and appended to the buffer."""
        import numpy as np

        self.check_open()
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, start + max(max_count, 0))
        entries = np.frombuffer(qi.raw(start, end - start) if start < end else b"", ENTRY_DTYPE)
        offsets = np.flatnonzero(entries["p1"]) + start
        entries = entries[entries["p1"] != 0]  # holes: data lost to a quarantine
        positions = entries["p1"].astype(np.int64) - 1
        lengths = entries["len"].astype(np.int64)
        parts: list[bytes] = []
        used = 0
        starts = np.full(len(positions), -1, np.int64)  # -1: gone (chunk deleted), dropped below
        verify = np.zeros(len(positions), bool)  # the tail cache holds the bytes we wrote: no CRC check
        old: list[tuple[int, tuple[int, int, bytes, bytes]]] = []  # rows of format-1 chunks
        i = 0
        try:
            while i < len(positions):
                pos = int(positions[i])
                src, delta, hi, c, cached = self._locate(pos)
                j = int(np.searchsorted(positions, hi, "left")) if src is not None else \
                    int(np.searchsorted(positions, pos - pos % self._size + self._size, "left"))
                j = max(j, i + 1)
                if src is None:
                    i = j
                    continue
                if c is not None and not cached and c.version != VERSION:
                    for k in range(i, j):
                        got = fields_at(src, int(positions[k]) + delta, int(lengths[k]),  # type: ignore[arg-type]
                                        self.options.verify_reads, c.version)
                        if got is None:
                            raise CorruptChunk(f"record at {positions[k]} fails validation", chunk=c.number,
                                               position=int(positions[k]))
                        old.append((k, got))
                    i = j
                    continue
                lo = pos + delta
                top = int(positions[j - 1] + lengths[j - 1]) + delta
                need = int(lengths[i:j].sum())
                if top - lo <= 4 * need + (1 << 20):  # one copy of the span, other queues' records and all
                    parts.append(src[lo:top])  # type: ignore[index]
                    starts[i:j] = positions[i:j] - pos + used
                    used += top - lo
                else:  # a sparse queue: each record on its own
                    ends = np.cumsum(lengths[i:j])
                    rows = zip(positions[i:j].tolist(), lengths[i:j].tolist(), strict=True)
                    parts.append(b"".join([src[a + delta : a + delta + m] for a, m in rows]))  # type: ignore[index]
                    starts[i:j] = ends - lengths[i:j] + used
                    used += need
                verify[i:j] = self.options.verify_reads and not cached
                if c is not None:
                    self._count(c, cached, j - i)
                i = j
        except ValueError:  # a chunk closed under us by retention: what was read so far stands
            starts[i:] = -1
            if i < len(offsets):
                end = int(offsets[i])
        buf = b"".join(parts)
        ts, flags, tag_start, tag_len, data_start, data_len, ok = record_columns(
            buf, starts, lengths, verify)
        ok &= starts >= 0
        for k, (t, f, tag, data) in old:  # format-1 rows: their fields appended to the buffer
            ts[k], flags[k], tag_start[k], tag_len[k] = t, f, used, len(tag)
            data_start[k], data_len[k] = used + len(tag), len(data)
            parts.append(tag + data)
            used += len(tag) + len(data)
            ok[k] = True
        if old:
            buf = b"".join(parts)
        bad = np.flatnonzero(~ok & (starts >= 0))
        if len(bad):
            pos = int(positions[bad[0]])
            raise CorruptChunk(f"record at {pos} fails validation", chunk=pos // self._size, position=pos)
        keep = ok
        next_offset = end if start < end else max(start, min(offset, qi.next))
        return ColumnPage(offsets[keep], positions[keep], ts[keep], flags[keep], tag_start[keep], tag_len[keep],
                          data_start[keep], data_len[keep], buf, next_offset)

    @staticmethod
    def _count(c: Chunk, cached: bool, n: int) -> None:
        if cached:
            c.reads_cache += n
        else:
            c.reads_disk += n

    def _read_general(
        self,
        qi: QueueIndex,
        start: int,
        end: int,
        max_count: int,
        max_bytes: int | None,
        tag_hashes: frozenset[int] | None,
    ) -> tuple[list[StoredMessage], int]:
        verify = self.options.verify_reads
        used = 0
        out: list[StoredMessage] = []
        o = start - 1
        try:
            for p1, length, th in _iter_entries(qi.raw(start, end - start)):
                o += 1
                if not p1 or (tag_hashes is not None and th not in tag_hashes):
                    continue
                pos = p1 - 1
                src, delta, _, c, cached = self._locate(pos)
                if src is None:
                    continue
                got = fields_at(src, pos + delta, length, verify and not cached,  # type: ignore[arg-type]
                                c.version if c is not None and not cached else VERSION)
                if got is None:
                    raise CorruptChunk(f"record at {pos} fails validation", chunk=pos // self._size, position=pos)
                ts, flags, tag, data = got
                if max_bytes is not None and out and used + len(data) > max_bytes:
                    o -= 1
                    break
                used += len(data)
                out.append((o, pos, ts, flags, tag, data))
                if c is not None:
                    self._count(c, cached, 1)
                if len(out) >= max_count:
                    break
        except ValueError:
            pass
        return out, o + 1

    def index_entries(self, queue_id: int, offset: int, count: int) -> list[IndexEntry]:
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, offset + count)
        if start >= end:
            return []
        return [IndexEntry(p - 1, n, th) for p, n, th in _iter_entries(qi.raw(start, end - start))]

    def read_at(self, position: int) -> Record:
        """The record at a global position; KeyError if deleted or not a record start."""
        self.check_open()
        c = self._chunks.get(position // self._size) if position >= 0 else None
        if c is None and position >= 0:
            c = self._fetched(position // self._size)
        if c is None:
            raise KeyError(position)
        local = c.local_of(position)
        if local < 0:
            raise KeyError(position)
        try:
            n = record_length(c.mm, CHUNK_HEADER + local, CHUNK_HEADER + c.data_bytes, c.version)
            if not n:
                raise KeyError(position)
            c.reads_disk += 1
            return decode(c.mm, CHUNK_HEADER + local, position, c.version)
        except ValueError as exc:  # closed by retention
            raise KeyError(position) from exc

    def _timestamp(self, qi: QueueIndex, offset: int) -> int | None:
        p1 = qi.entry(offset)[0]
        if not p1:
            return None
        c = self._chunks.get((p1 - 1) // self._size) or self._fetched((p1 - 1) // self._size)
        if c is None:
            return None
        local = c.local_of(p1 - 1)
        if local < 0:
            return None
        try:
            return timestamp_at(c.mm, CHUNK_HEADER + local, c.version)
        except ValueError:
            return None

    def timestamp_of(self, queue_id: int, offset: int) -> int | None:
        qi = self._queue(queue_id)
        if not qi.first <= offset < qi.next:
            return None
        return self._timestamp(qi, offset)

    def offset_for_timestamp(self, queue_id: int, timestamp_ms: int) -> int:
        """First offset in [first, next] whose timestamp >= timestamp_ms (binary search)."""
        qi = self._queue(queue_id)
        lo, hi = qi.first, qi.next
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self._timestamp(qi, mid)
            if ts is None or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def scan(self, from_position: int = 0) -> Iterator[Record]:
        """Every valid record at or after ``from_position`` (a record start), in log order."""
        self.check_open()
        end = self._end
        for c in self.chunk_files():
            if c.end <= from_position:
                continue
            if c.moved_positions is None:
                p = CHUNK_HEADER + max(0, from_position - c.base)
            else:
                moved = c.moved_offsets
                assert moved is not None  # set together with moved_positions
                i = bisect_left(c.moved_positions, from_position)
                p = CHUNK_HEADER + (moved[i] if i < len(moved) else c.data_bytes)
            limit = CHUNK_HEADER + min(c.data_bytes, end - c.base)
            try:
                for off, n, *_ in iter_records(c.mm, p, limit, c.version):
                    yield decode(c.mm, off, c.position_of(off - CHUNK_HEADER), c.version)
                    p = off + n
                if p < limit:
                    log.error("chunk %d: invalid record at data offset %d; rest of the chunk skipped",
                              c.number, p - CHUNK_HEADER)
            except ValueError:
                continue  # deleted by retention while scanning

    def scan_since(self, timestamp_ms: int) -> Iterator[Record]:
        """Records with timestamp >= timestamp_ms, starting at the first chunk that can hold one."""
        start = None
        for c in self.chunk_files():
            if c.records and c.last_ts >= timestamp_ms:
                start = c.base
                break
        if start is None:
            return
        for r in self.scan(start):
            if r.timestamp >= timestamp_ms:
                yield r

    # ------------------------------------------------------------------ retention and statistics
    def retain(self, floors: Mapping[int, int], *, free_bytes: int = 0) -> RetentionReport:
        """Delete what no queue needs any more; with ``free_bytes``, also the oldest sealed chunks
        that queues still need, until that many bytes are freed (see retention.py)."""
        report = retain(self, floors, free_bytes)
        if self._collector is not None:
            self._collector.wake()  # floors moved: chunks may have become sparse
        return report

    def collect(self, threshold: float | None = None) -> GcReport:
        """One collector pass now, at full speed: rewrite the sealed chunks whose live share is below
        ``threshold`` (default: the option, or 0.5), merging sparse neighbours (see gc.py)."""
        if threshold is None:
            threshold = self.options.gc_threshold or 0.5
        return collect(self, threshold, 1.0)

    # ------------------------------------------------------------------ tiered storage
    @property
    def remote(self) -> dict[int, RemoteChunk]:
        """Chunks in the bucket only, by each number they stand for (tier.py)."""
        return self._remote

    def evict(self, number: int, key: str, size: int) -> int:
        """Take sealed chunk file ``number``, whose object ``key`` of ``size`` bytes the caller has
        verified in the bucket, off the local disk: a stub takes its place (tier.py), and reads of it
        fetch it back (``fetcher``). Returns the bytes freed. Readers inside it finish on its mmap."""
        from .tier import RemoteChunk, write_stub

        self.flush()  # the recovery point past it: a restart never replays records of an evicted chunk
        with self._lock:
            self.check_open()
            c = self._chunks.get(number)
            if c is None or c.number != number or not c.sealed or c is self._active:
                raise StorageError(f"chunk {number} is not a sealed chunk file of this store")
            freed = c.file_bytes
            r = RemoteChunk(number, c.last, key, size)
            write_stub(c.path, r)
            self.forget(c)
            for n in range(number, c.last + 1):
                self._remote[n] = r
            c.release_fd()  # the mmap stays valid for readers in it, the file's blocks go with it
            c.path.unlink()
        files.fsync_dir(c.path.parent)
        return freed

    def fetch(self, number: int) -> Chunk | None:
        """Bring evicted chunk ``number`` back to the local disk (it is an ordinary sealed chunk file
        again); the chunk, or None if it is not evicted or nothing can fetch it. Blocks for the fetch:
        the broker calls it off its event loop before reads it knows need it (``warm``)."""
        return self._chunks.get(number) or self._fetched(number)

    def warm(self, queue_id: int, offset: int, count: int) -> int:
        """Fetch every evicted chunk that entries [offset, offset + count) of a queue point into;
        returns how many were fetched. Costs nothing when no chunk is evicted."""
        if not self._remote:
            return 0
        wanted = {p - 1 for p, _, _ in _iter_entries(self._queue(queue_id).raw(*self._span(queue_id, offset, count)))
                  if p and (p - 1) // self._size in self._remote}
        numbers = {p // self._size for p in wanted}
        return sum(self._fetched(n) is not None for n in sorted(numbers))

    def warm_position(self, position: int) -> None:
        if self._remote and position >= 0 and position // self._size in self._remote:
            self._fetched(position // self._size)

    def _span(self, queue_id: int, offset: int, count: int) -> tuple[int, int]:
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        return start, max(0, min(qi.next, start + count) - start)

    def _fetched(self, number: int) -> Chunk | None:
        r = self._remote.get(number)
        fetcher = self.fetcher
        if r is None or fetcher is None:
            return None
        from .tier import restore_file, stub_path

        with self._fetch_lock:  # one fetch at a time: two readers of one chunk fetch it once
            c = self._chunks.get(number)
            if c is not None or number not in self._remote:
                return c
            path = files.chunk_path(self.root, r.number)
            restore_file(fetcher(r.key, r.size), path, self._size)
            c = Chunk.open(path, r.number, self._size)
            if not c.read_footer() or c.last != r.last:
                c.close()
                path.unlink(missing_ok=True)
                raise CorruptChunk(f"chunk {r.number} fetched from {r.key} is not the chunk evicted", chunk=r.number)
            c.release_fd()
            c.fetched_at = time.monotonic()
            with self._lock:
                if self._remote.get(number) is not r:  # retention deleted it meanwhile
                    c.close()
                    path.unlink(missing_ok=True)
                    return None
                for n in range(r.number, r.last + 1):
                    self._chunks[n] = c
                    self._remote.pop(n, None)
            stub_path(path).unlink(missing_ok=True)
            files.fsync_dir(path.parent)
            return c

    def drop_remote(self, numbers: list[int]) -> None:
        """Forget evicted chunks no queue needs (retention, writer lock held): their stubs go."""
        from .tier import stub_path

        for n in numbers:
            r = self._remote.get(n)
            if r is None:
                continue
            for m in range(r.number, r.last + 1):
                self._remote.pop(m, None)
            stub_path(files.chunk_path(self.root, r.number)).unlink(missing_ok=True)
            self._dropped_remote.append(r)

    def take_dropped_remote(self) -> list[RemoteChunk]:
        """The evicted chunks retention dropped since the last call (the tier deletes their objects)."""
        with self._lock:
            out, self._dropped_remote = self._dropped_remote, []
        return out

    def add_remote(self, r: RemoteChunk) -> bool:
        """Know a chunk that is in the bucket only (the manifest has it, the data directory does not:
        a stub lost with a disk); False if some number of it is known already."""
        from .tier import write_stub

        with self._lock:
            self.check_open()
            if any(n in self._chunks or n in self._remote for n in range(r.number, r.last + 1)):
                return False
            write_stub(files.chunk_path(self.root, r.number), r)
            for n in range(r.number, r.last + 1):
                self._remote[n] = r
            self.floors_changed = True
        return True

    # ------------------------------------------------------------------ for recovery.py, retention.py, gc.py
    @property
    def chunk_size(self) -> int:
        return self._size

    @property
    def writer_lock(self) -> threading.RLock:
        return self._lock

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def queue_indexes(self) -> dict[int, QueueIndex]:
        return self._queues

    @property
    def chunk_map(self) -> dict[int, Chunk]:
        return self._chunks

    @property
    def active_chunk(self) -> Chunk | None:
        return self._active

    def adopt(self, chunks: dict[int, Chunk], queues: dict[int, QueueIndex], next_number: int) -> None:
        """Install the chunks and queue indexes recovery found (by number, each file once): the
        newest chunk becomes the active one, a rewritten file is mapped to every number it replaced,
        and appends continue at the active chunk's end (or at chunk `next_number`)."""
        self._chunks = dict(sorted(chunks.items()))
        self._queues = queues
        for c in self._chunks.values():
            if c.sealed:
                c.release_fd()
        self._active = self._chunks[max(self._chunks)] if self._chunks else None
        for c in list(self._chunks.values()):
            for alias in range(c.number + 1, c.last + 1):  # the numbers a rewritten file replaced
                self._chunks[alias] = c
        self._next_number = next_number
        a = self._active
        if a is not None:
            a.map_writes()
        self._end = a.base + a.data_bytes if a is not None else next_number * self._size
        self._last_ts = max((c.last_ts for c in self._chunks.values()), default=0)

    def chunk_files(self) -> list[Chunk]:
        """Every chunk file once, by number (a merged file is also reachable by the numbers it replaced)."""
        return [c for n, c in sorted(list(self._chunks.items())) if c.number == n]

    def forget(self, c: Chunk) -> None:
        """Take a chunk file and every number it stands for out of the map (writer lock held)."""
        for n in range(c.number, c.last + 1):
            if self._chunks.get(n) is c:
                del self._chunks[n]
        self._dirty.discard(c)

    def live_bytes(self) -> dict[int, int]:
        """Per chunk file (by number): bytes of records some queue still needs, at or above its floor.

        Each queue counts its own entries (QueueIndex.chunk_bytes), so a record placed in several
        queues counts once per queue that still needs it: an upper bound, capped at the chunk's bytes.
        """
        chunks = self._chunks
        live: dict[int, int] = {}
        for qi in list(self._queues.values()):
            for number, n in list(qi.chunk_bytes.items()):
                c = chunks.get(number)
                if c is not None:
                    live[c.number] = live.get(c.number, 0) + n
        for number, n in live.items():
            c = chunks.get(number)
            if c is not None and n > c.data_bytes:
                live[number] = c.data_bytes
        return live

    @property
    def chunk_file_bytes(self) -> int:
        """Size of one chunk file (allocated whole when it is created)."""
        return CHUNK_HEADER + self._size + CHUNK_FOOTER

    @property
    def index_file_bytes(self) -> int:
        """Size of one full queue index file (sparse: its blocks are allocated as entries fill it)."""
        return index_file_size(self.options.index_chunk_entries)

    def chunks(self) -> list[ChunkInfo]:
        live = self.live_bytes()
        return [
            ChunkInfo(c.number, ChunkState.ACTIVE if c is self._active and not c.sealed else ChunkState.SEALED, c.path,
                      c.data_bytes, c.records, c.reads_cache, c.reads_disk, c.writes, c.created_ms, c.first_ts,
                      live.get(c.number, 0), c.file_bytes, c.rewritten, c.last)
            for c in self.chunk_files()
        ]

    def disk_bytes(self) -> int:
        """Bytes allocated on disk by the log and the indexes (chunks are preallocated, index files sparse)."""
        return files.allocated_in(files.log_dir(self.root)) + self.index_bytes()

    def held(self) -> tuple[int, int]:
        """(messages, bytes) every queue holds, summed: kept per queue and counted again only for the
        queues that changed (changed_queues). Thread-safe."""
        with self._measure_lock:
            for q in self.changed_queues("held"):
                qi = self._queues.get(q)
                now = (qi.next - qi.first, qi.bytes) if qi is not None else (0, 0)
                before = self._held.pop(q, (0, 0))
                self._held_total = (self._held_total[0] + now[0] - before[0], self._held_total[1] + now[1] - before[1])
                if qi is not None:
                    self._held[q] = now
            return self._held_total

    def index_bytes(self, opened_only: bool = False) -> int:
        """Bytes allocated by every queue's index files. Each queue's directory is measured once, then
        again only when the queue changed (changed_queues): tens of thousands of queues are not
        walked at every call. `opened_only` (a start's first measure) leaves the queues whose files
        are not open yet for the next call. Thread-safe."""
        with self._measure_lock:
            changed = self.changed_queues("index bytes")
            if opened_only:
                later = {q for q in changed if (qi := self._queues.get(q)) is not None and not qi.opened}
                with self._lock:
                    self._changed["index bytes"] |= later
                changed -= later
            for q in changed:
                n = files.allocated_in(files.queue_dir(self.root, q))
                self._index_total += n - self._index_bytes.pop(q, 0)
                if n:
                    self._index_bytes[q] = n
            return self._index_total

    def verify(self) -> list[int]:
        """Check every record of every sealed chunk; quarantine the corrupt ones. Returns their numbers."""
        bad: list[int] = []
        for c in self.chunk_files():
            if not c.sealed:
                continue
            if c.scan(0, c.data_bytes)[4] != c.data_bytes:
                bad.append(c.number)
        for number in bad:
            self.quarantine(number)
        return bad

    def quarantine(self, number: int) -> None:
        """Take a sealed chunk out of service (renamed .bad); entries pointing into it read as gone."""
        with self._lock:
            c = self._chunks.get(number)
            if c is None or c.number != number or (c is self._active and not c.sealed):
                raise StorageError(f"chunk {number} is not a sealed chunk of this store")
            self.forget(c)
        log.error("chunk %d is corrupt: quarantined as %s", number, files.with_suffix(c.path, files.BAD_SUFFIX))
        files.quarantine(c.path)
        c.close()
