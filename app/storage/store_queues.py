"""The queues of a Store (the Queues part): create, delete, offsets, floors."""

from __future__ import annotations

from pathlib import Path

from . import files
from .queue_index import QueueIndex
from .store_durability import Durability


class Queues(Durability):
    """A Store's queues: their creation and deletion, their offsets and their floors.

    Thread-safe: the changes take the writer lock; the reads of one counter take none (each is one
    attribute read of the queue's index).
    """

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
