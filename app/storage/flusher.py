"""The flusher thread: group commit for FsyncMode.ALWAYS, periodic fsync for INTERVAL, and the
periodic checkpoint (index fsync + recovery point) for every mode.

Group commit: ``durable(pos)`` registers a future; the thread wakes, takes one fdatasync of every
chunk written since the last sync (covering everything appended so far, by any thread), then
resolves every waiter at or below the synced position. Writers that arrive during an fsync share
the next one. Before an fsync the thread waits for as many writers as the last one served, for at
most half an fsync's time (`_gather`): N connections publishing one message each answer together,
so their next publishes arrive within a fraction of an fsync of each other, and the fsync that
started with the first of them left the others to one more fsync of their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from .errors import StoreClosed
from .model import FsyncMode

log = logging.getLogger(__name__)


class Flusher:
    def __init__(
        self,
        mode: FsyncMode,
        interval_s: float,
        checkpoint_s: float,
        sync_log: Callable[[], int],
        checkpoint: Callable[[], None],
    ) -> None:
        self._mode = mode
        self._interval = interval_s
        self._checkpoint_every = checkpoint_s
        self._sync_log = sync_log  # fsyncs the log, returns the position now durable
        self._checkpoint = checkpoint
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, Future[None]]] = []
        self._stopping = False
        self.synced = 0
        self.syncs = 0
        self._group = 1  # how many waiters the last fsync served or left for the next
        self._sync_seconds = 0.0  # how long it took
        self._thread = threading.Thread(target=self._run, name="chunkmq-flusher", daemon=True)

    def start(self, synced: int) -> None:
        self.synced = synced
        self._thread.start()

    def durable(self, position: int) -> Future[None]:
        fut: Future[None] = Future()
        with self._cond:
            if position <= self.synced:
                fut.set_result(None)
                return fut
            if self._stopping:
                fut.set_exception(StoreClosed("the store is closing"))
                return fut
            self._waiters.append((position, fut))
            if len(self._waiters) == 1 or len(self._waiters) >= self._group:  # what the thread waits for
                self._cond.notify()
        return fut

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _gather(self) -> None:
        """Wait (condition held) until as many writers wait as the last fsync served, the store
        stops, or half the last fsync's time has passed."""
        if len(self._waiters) >= self._group:
            return
        deadline = time.monotonic() + self._sync_seconds / 2
        while len(self._waiters) < self._group and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _sync(self) -> None:
        started = time.monotonic()
        try:
            synced = self._sync_log()
            error: BaseException | None = None
        except Exception as exc:  # an fsync failure must reach the waiters, not kill the thread
            log.exception("fsync of the message log failed")
            synced, error = self.synced, exc
        self._sync_seconds = time.monotonic() - started
        self.syncs += 1
        with self._cond:
            self.synced = max(self.synced, synced)
            keep: list[tuple[int, Future[None]]] = []
            done: list[Future[None]] = []
            for pos, fut in self._waiters:
                if error is not None or pos <= self.synced:
                    done.append(fut)
                else:
                    keep.append((pos, fut))
            self._waiters = keep
            if done:  # the writers it served and those that came during it: who will wait next
                self._group = len(done) + len(keep)
        for fut in done:
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(None)

    def _run(self) -> None:
        now = time.monotonic()
        next_sync = now + self._interval
        next_checkpoint = now + self._checkpoint_every
        while True:
            with self._cond:
                while not self._waiters and not self._stopping:
                    deadline = next_checkpoint
                    if self._mode is FsyncMode.INTERVAL:
                        deadline = min(deadline, next_sync)
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                    self._cond.wait(timeout)
                if self._waiters and self._mode is FsyncMode.ALWAYS:
                    self._gather()
                stopping = self._stopping
                waiting = bool(self._waiters)
            if stopping:
                if waiting:
                    self._sync()
                return
            now = time.monotonic()
            if waiting or (self._mode is FsyncMode.INTERVAL and now >= next_sync):
                self._sync()
                next_sync = now + self._interval
            if now >= next_checkpoint:
                try:
                    self._checkpoint()
                except Exception:
                    log.exception("writing the checkpoint failed")
                next_checkpoint = time.monotonic() + self._checkpoint_every
