"""The Store's state (StoreState): its fields, their invariants, and the bookkeeping every part of
the Store shares (which queues changed, the internal interface of internals.StoreInternals)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from . import checkpoint
from .chunk import Chunk
from .errors import StoreClosed, UnknownQueue
from .flusher import Flusher
from .model import FsyncMode, RecoveryReport, StoreOptions
from .queue_index import QueueIndex

if TYPE_CHECKING:
    from .gc import Collector
    from .tier import RemoteChunk


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreState:
    """The state every part of a Store works on, and the few operations they all share.

    Invariants (the writer lock held for every change):
    - ``_active`` is the chunk appends go to; None or sealed means the next append rolls first;
    - ``_end`` (end_position) is the position after the last appended record: the active chunk's
      base plus its data bytes, or ``_next_number * chunk size`` before the first chunk exists;
    - ``_chunks`` maps every chunk number to its file, a file the collector rewrote under each
      number it replaced; a number of ``_remote`` (evicted to the bucket) is never in ``_chunks``;
    - ``_changed`` holds, per reader (the checkpoint, the broker's rounds), the queues changed since
      its last look; ``_changed_sets`` is the same sets as a list, for the hot paths to update.

    Not thread-safe by itself: the parts (store_writes.py, store_reads.py, ...) say which of their
    methods take the writer lock.
    """

    recovery: RecoveryReport
    _flusher: Flusher  # set by Durability (store_durability.py)

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

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

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

    @property
    def end_position(self) -> int:
        """Global position after the last appended record."""
        return self._end

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

    def chunk_files(self) -> list[Chunk]:
        """Every chunk file once, by number (a merged file is also reachable by the numbers it replaced)."""
        return [c for n, c in sorted(list(self._chunks.items())) if c.number == n]

    def forget(self, c: Chunk) -> None:
        """Take a chunk file and every number it stands for out of the map (writer lock held)."""
        for n in range(c.number, c.last + 1):
            if self._chunks.get(n) is c:
                del self._chunks[n]
        self._dirty.discard(c)
