"""The disk budget and disk-full state: what the data directory takes, and whether a publish may add.

The budget (CHUNKMQ_DISK_BUDGET_BYTES) counts every file under the data directory by allocated
blocks: chunks (allocated whole when created), queue indexes (sparse, growing by a 16-byte entry
per placement), the checkpoint, dedup snapshots, meta.db and its WAL. Walking the tree is far too slow
for every publish, so a background job measures it every second in a worker thread, and a publish
checks a conservative estimate instead: the last measurement, plus what appends allocated since
(whole chunk files, index entries), plus what this batch may allocate (a new chunk when it may not
fit in the active one, its index entries). Files grown while the walk runs are counted twice at
worst, never missed.

The walk is proportional to what changed: the queue index directories (one per queue, tens of
thousands of them) are counted by Store.index_bytes, which measures again only those of the queues
that changed since; everything else under the data directory (the log, the metadata database,
snapshots) is walked every time.

Policy `reject` (default): a publish that could take the directory past the budget is refused with
507 storage_full, nothing of it stored. Policy `drop_oldest`: publishes are not checked; the
retention pass deletes the oldest chunks, consumed or not, until the directory is under the budget
(`excess`).

Readiness: `refusal()` names why publishes are (or are about to be) refused for lack of space: the
last append failed with ENOSPC, or the last publish was refused by the budget, and nothing was
stored or freed since; the disk's free space is below one chunk file; or the budget has no room
left for one.

Owned by the event loop thread, like the rest of the broker; only the walk runs in a thread.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from chunkmq.broker.errors import StorageFull
from chunkmq.config import DiskBudgetPolicy, Settings
from chunkmq.storage import BatchSpace, Store, files

_BLOCK = 4096  # allocation granularity assumed for a new chunk file


def _blocks(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def allocated_bytes(root: Path, skip: Path | None = None) -> int:
    """Bytes allocated on disk by every file under ``root`` (st_blocks, so sparse files count only
    what they hold and preallocated ones all they reserved), except under the directory ``skip``."""
    total = 0
    for dirpath, dirs, names in os.walk(root):
        if skip is not None and Path(dirpath) == skip.parent and skip.name in dirs:
            dirs.remove(skip.name)
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass  # deleted by retention during the walk
    return total


def free_bytes(root: Path) -> int:
    """Bytes an unprivileged process may still allocate on the file system holding ``root``."""
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize


class DiskGuard:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.root = settings.data_dir
        self.store = store
        self.budget = settings.disk_budget_bytes
        self.policy = settings.disk_budget_policy
        # the budget publishes are checked against: only under the reject policy
        self.limit = self.budget if self.policy is DiskBudgetPolicy.REJECT else 0
        self.chunk_file = _blocks(store.chunk_file_bytes)
        # an index file (header + entries) is allocated block by block as entries fill it: per entry,
        # a full file's blocks over its entries (20 bytes with 1,024 entries, 16.003 with a million)
        entries = store.options.index_chunk_entries
        self.entry_bytes = _blocks(store.index_file_bytes) / entries
        self.used = 0  # bytes under the data directory at the last measurement
        self._queues_dir = files.queues_dir(store.root)
        self.free = 0  # free bytes on its file system then
        self.placed = 0  # index entries written by checked publishes, ever
        self.refused = 0  # publishes refused by the budget, ever
        self.failure: str | None = None  # the last append's ENOSPC, until an append succeeds or space is freed
        self.over: str | None = None  # the last checked publish was refused by the budget (same lifetime)
        self._placed_at = 0
        self._chunk_at = 0

    # ------------------------------------------------------------------ measuring

    def _chunk_number(self) -> int:
        return self.store.chunks_created

    def _walk(self, opened_only: bool = False) -> tuple[int, int]:
        """(bytes under the data directory, free bytes on its file system)."""
        indexes = self.store.index_bytes(opened_only)
        return allocated_bytes(self.root, skip=self._queues_dir) + indexes, free_bytes(self.root)

    def measure_now(self) -> None:
        """Measure synchronously (on start, before the first publish). The index files of the queues
        not opened yet (idle since the last stop) are left to the first background measure, a second
        later: walking tens of thousands of directories would hold the start back."""
        chunk_at, placed_at = self._chunk_number(), self.placed
        self._record(*self._walk(opened_only=True), chunk_at, placed_at)

    async def measure(self) -> None:
        """Measure in a worker thread (the background job, and after retention freed space)."""
        chunk_at, placed_at = self._chunk_number(), self.placed
        used, free = await asyncio.to_thread(self._walk)
        self._record(used, free, chunk_at, placed_at)

    def _record(self, used: int, free: int, chunk_at: int, placed_at: int) -> None:
        if free > self.free:
            self.failure = None  # space was freed since the failed append
        if used < self.used:
            self.over = None
        self.used, self.free, self._chunk_at, self._placed_at = used, free, chunk_at, placed_at

    def _new_chunks(self) -> int:
        return max(0, self._chunk_number() - self._chunk_at)

    def estimate(self) -> int:
        """Conservative bytes under the data directory now."""
        return (self.used + self._new_chunks() * self.chunk_file
                + int((self.placed - self._placed_at) * self.entry_bytes))

    # ------------------------------------------------------------------ the publish path

    def admit(self, space: BatchSpace) -> None:
        """Refuse a batch that could take the data directory past the budget (the store calls this,
        given to it only when `limit`, before it writes anything). The batch's index entries are
        counted as written from here on."""
        need = self.estimate() + int(space.placements * self.entry_bytes) + space.queues * _BLOCK
        if space.new_chunk:
            need += self.chunk_file
        if need > self.limit:
            self.refused += 1
            self.over = (f"the disk budget is reached: the data directory holds about {self.estimate()} of "
                         f"{self.limit} bytes (CHUNKMQ_DISK_BUDGET_BYTES)")
            raise StorageFull(f"{self.over} and this batch needs up to {need - self.estimate()} more; "
                              "nothing of it was stored")
        self.over = None
        self.placed += space.placements

    def failed(self, reason: str) -> None:
        """An append failed for lack of space (ENOSPC, EFBIG, EDQUOT)."""
        self.failure = reason

    def freed(self) -> None:
        """Retention deleted files: a refused or failed append may succeed again."""
        self.failure = self.over = None

    # ------------------------------------------------------------------ policy and readiness

    def excess(self) -> int:
        """drop_oldest: bytes retention must free to bring the data directory under the budget."""
        if self.policy is not DiskBudgetPolicy.DROP_OLDEST or not self.budget:
            return 0
        return max(0, self.estimate() - self.budget)

    def refusal(self) -> str | None:
        """Why publishes would be refused for lack of space now, or None."""
        if self.failure is not None:
            return f"the disk is full: the last append failed ({self.failure})"
        free = self.free - self._new_chunks() * self.chunk_file
        if free < self.chunk_file:
            return f"{max(free, 0)} bytes free on the disk, the next chunk needs {self.chunk_file}"
        if self.over is not None:
            return self.over
        if self.limit and self.limit - self.estimate() < self.chunk_file:
            return (f"the disk budget is reached: the data directory holds about {self.estimate()} of "
                    f"{self.limit} bytes, the next chunk needs {self.chunk_file}")
        return None
