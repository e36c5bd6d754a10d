"""Durability of a Store (the Durability part): group commit and recovery points."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from . import checkpoint
from .errors import os_failure as _fail
from .flusher import Done, Flusher
from .model import StoreOptions
from .store_state import StoreState, now_ms

if TYPE_CHECKING:
    import asyncio


# The future of an append in INTERVAL and NEVER modes: completed, shared (one per append cost a
# Condition and a lock each, on every single-message publish).
_DONE: Future[None] = Future()
_DONE.set_result(None)


class Durability(StoreState):
    """When appended records are on disk: the group commit of the flusher thread (flusher.py), and
    the recovery point (checkpoint.py) written after each fsync of the log and the indexes.

    Thread-safe: flush() serialises recovery points on their own lock, and takes the writer lock
    only to snapshot what changed; fsyncs run without it.
    """

    def __init__(self, root: Path, options: StoreOptions) -> None:
        super().__init__(root, options)
        self._flusher = Flusher(
            options.fsync,
            options.fsync_interval_ms / 1000,
            options.checkpoint_interval_ms / 1000,
            self._sync_log,
            self.flush,
        )

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
            cp = checkpoint.Checkpoint(position, records, first_ts, now_ms(), queues)
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
