"""The statistics of a Store (the Statistics part): live bytes, chunks, held messages, disk use."""

from __future__ import annotations

from . import files
from .chunk import FOOTER_SIZE as CHUNK_FOOTER
from .chunk import HEADER_SIZE as CHUNK_HEADER
from .model import ChunkInfo, ChunkState
from .queue_index import index_file_size
from .store_state import StoreState


class Statistics(StoreState):
    """What a Store holds and takes: per chunk, per queue, on disk. Thread-safe."""

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
