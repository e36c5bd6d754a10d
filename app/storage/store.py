"""The Store: one global message log in chunk files plus one index per queue.

Thread-safety: one writer at a time (append, create_queue, delete_queue, set_first_offset, retain
take the internal lock, so several threads may call them); readers (read, read_matching, read_at,
index_entries, scan, ...) run concurrently without the lock. The flusher thread fsyncs the log
(group commit) and writes the recovery point.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from . import files
from .chunk import Chunk
from .errors import StorageError
from .gc import Collector, collect
from .model import GcReport, RetentionReport, StoreOptions
from .queue_index import QueueIndex
from .recovery import recover
from .retention import retain
from .store_queues import Queues
from .store_reads import Reads
from .store_statistics import Statistics
from .store_writes import Writes

log = logging.getLogger("chunkmq.storage")


class Store(Queues, Writes, Reads, Statistics):
    """A message log with per-queue offset indexes. Open with Store.open(directory, options).

    Its parts, one concept each, share one state (store_state.StoreState): Queues
    (store_queues.py), Writes (store_writes.py), Reads (store_reads.py, with Tiering in
    store_tiering.py), Durability (store_durability.py) and Statistics (store_statistics.py).
    This class opens and closes a store and hands it to its maintenance modules (recovery.py,
    retention.py, gc.py), which use only its internal interface, internals.StoreInternals (a
    Protocol), never the private attributes.
    """

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

    # ------------------------------------------------------------------ maintenance: retention, gc, recovery, verify
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
