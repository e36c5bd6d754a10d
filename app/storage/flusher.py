"""The flusher thread: group commit for FsyncMode.ALWAYS, periodic fsync for INTERVAL, and the
periodic checkpoint (index fsync + recovery point) for every mode.

Group commit: ``durable(pos)`` registers a future (``when_durable`` a callback on an event loop);
the thread wakes, takes one fdatasync of every chunk written since the last sync (covering
everything appended so far, by any thread), then resolves every waiter at or below the synced
position. Writers that arrive during an fsync share the next one. Before an fsync the thread waits
for as many writers as the last one served, for at most half an fsync's time (`_gather`): N
connections publishing one message each answer together, so their next publishes arrive within a
fraction of an fsync of each other, and the fsync that started with the first of them left the
others to one more fsync of their own. The callbacks an fsync ends on one event loop run there in
one call: one wake of the loop per fsync, however many wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, NamedTuple

from .errors import StoreClosed
from .model import FsyncMode

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

Done = Callable[[BaseException | None], None]  # called with the fsync's error, or None


class OnLoop(NamedTuple):
    """A waiter on an event loop: `done` is called in `loop`."""

    loop: asyncio.AbstractEventLoop
    done: Done


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
        self._waiters: list[tuple[int, Future[None] | OnLoop]] = []
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
            self._wait(position, fut)
        return fut

    def when_durable(self, position: int, loop: asyncio.AbstractEventLoop, done: Done) -> bool:
        """Have `done` called in `loop` (the caller's) once everything below `position` is fsynced;
        False, and nothing called, when it is already. Raises StoreClosed once the flusher stops."""
        with self._cond:
            if position <= self.synced:
                return False
            if self._stopping:
                raise StoreClosed("the store is closing")
            self._wait(position, OnLoop(loop, done))
        return True

    def _wait(self, position: int, waiter: Future[None] | OnLoop) -> None:
        self._waiters.append((position, waiter))
        if len(self._waiters) == 1 or len(self._waiters) >= self._group:  # what the thread waits for
            self._cond.notify()

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
            keep: list[tuple[int, Future[None] | OnLoop]] = []
            done: list[Future[None] | OnLoop] = []
            for waiting in self._waiters:
                if error is not None or waiting[0] <= self.synced:
                    done.append(waiting[1])
                else:
                    keep.append(waiting)
            self._waiters = keep
            if done:  # the writers it served and those that came during it: who will wait next
                self._group = len(done) + len(keep)
        on_loops: dict[asyncio.AbstractEventLoop, list[Done]] = {}
        for waiter in done:
            if isinstance(waiter, OnLoop):
                on_loops.setdefault(waiter.loop, []).append(waiter.done)
            elif not waiter.set_running_or_notify_cancel():
                continue  # its caller gave up waiting (asyncio.wrap_future cancels it): nothing to tell
            elif error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(None)
        for loop, calls in on_loops.items():
            try:
                loop.call_soon_threadsafe(_call_all, calls, error)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

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


def _call_all(calls: list[Done], error: BaseException | None) -> None:
    for done in calls:
        try:
            done(error)
        except Exception:  # one waiter's failure must not leave the others waiting
            log.exception("a callback of the fsync failed")
