"""Tiered storage of a Store (the Tiering part): evict, fetch and the stubs of evicted chunks."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import files
from .chunk import Chunk
from .errors import CorruptChunk, StorageError
from .queue_index import ENTRY
from .store_durability import Durability

if TYPE_CHECKING:
    from .tier import RemoteChunk


_iter_entries = ENTRY.iter_unpack


class Tiering(Durability):
    """Chunks evicted to a tier's bucket (tier.py): eviction, the stubs that stand for them, and
    fetching one back when a read needs it.

    Thread-safe: eviction and the stubs take the writer lock; fetches run one at a time on their
    own lock, and take the writer lock only to install the fetched chunk.
    """

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
