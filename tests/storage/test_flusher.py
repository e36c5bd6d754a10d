"""The flusher thread (app/storage/flusher.py) over a real file: group commit resolves a waiter only
once its position is fsynced, concurrent writers share fsyncs, waiters on an event loop are called
there in one call per fsync, a failed fsync reaches the waiters
without killing the thread, INTERVAL syncs with nobody waiting, and the checkpoint runs on time."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from chunkmq.storage.errors import StoreClosed
from chunkmq.storage.flusher import Flusher
from chunkmq.storage.model import FsyncMode


class Log:
    """A real append-only file: `sync` fdatasyncs it and answers the position now durable."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        self.written = 0
        self.fail_next = 0
        self.checkpoints = 0
        self.lock = threading.Lock()
        self.gate = threading.Event()  # a sync waits for it
        self.gate.set()

    def append(self, data: bytes) -> int:
        with self.lock:
            os.write(self.fd, data)
            self.written += len(data)
            return self.written

    def sync(self) -> int:
        if self.fail_next:
            self.fail_next -= 1
            raise OSError(5, "Input/output error")
        self.gate.wait()
        end = self.written  # read before the fsync: what it covers at least
        os.fdatasync(self.fd)
        return end

    def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.checkpoints == 1:
            raise RuntimeError("the first checkpoint fails")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    log = Log(tmp_path / "log")
    yield log
    os.close(log.fd)


def _flusher(log: Log, mode: FsyncMode = FsyncMode.ALWAYS, interval: float = 60.0, checkpoint: float = 60.0) -> Flusher:
    flusher = Flusher(mode, interval, checkpoint, log.sync, log.checkpoint)
    flusher.start(0)
    return flusher


def test_a_position_already_synced_resolves_at_once(log: Log) -> None:
    flusher = Flusher(FsyncMode.ALWAYS, 60.0, 60.0, log.sync, log.checkpoint)
    flusher.start(100)
    try:
        assert flusher.durable(100).done() and flusher.syncs == 0
    finally:
        flusher.stop()


def test_group_commit_resolves_after_an_fsync_that_covers_the_position(log: Log) -> None:
    flusher = _flusher(log)
    try:
        end = log.append(b"x" * 1000)
        flusher.durable(end).result(timeout=10)
        assert flusher.synced >= end and flusher.syncs >= 1
    finally:
        flusher.stop()


def test_a_waiter_that_gave_up_is_skipped_and_the_thread_goes_on(log: Log) -> None:
    """A caller that stops waiting cancels its future (asyncio.wrap_future does, with its task):
    the fsync that covers it must skip it, not die of InvalidStateError and leave every later
    writer waiting."""
    flusher = _flusher(log)
    try:
        log.gate.clear()  # the next fsync waits until the first waiter has gone
        end = log.append(b"x" * 100)
        gone, staying = flusher.durable(end), flusher.durable(end)
        assert gone.cancel()
        log.gate.set()
        staying.result(timeout=10)
        later = log.append(b"y" * 100)
        flusher.durable(later).result(timeout=10)  # the thread is still there
        assert flusher.synced >= later
    finally:
        flusher.stop()


def test_concurrent_writers_share_fsyncs(log: Log) -> None:
    flusher = _flusher(log)
    futures: list[Future[None]] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(50):
            fut = flusher.durable(log.append(b"y" * 100))
            with lock:
                futures.append(fut)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        for fut in futures:
            fut.result(timeout=10)
        assert flusher.synced == log.written == 8 * 50 * 100
        assert flusher.syncs < len(futures)  # waiters that arrived during an fsync shared the next
    finally:
        flusher.stop()


def test_a_failed_fsync_fails_its_waiters_and_the_next_one_works(log: Log) -> None:
    flusher = _flusher(log)
    try:
        log.fail_next = 1
        with pytest.raises(OSError, match="Input/output error"):
            flusher.durable(log.append(b"z")).result(timeout=10)
        assert flusher.synced == 0  # nothing was claimed durable
        flusher.durable(log.append(b"z")).result(timeout=10)
        assert flusher.synced == 2
    finally:
        flusher.stop()


def test_interval_mode_syncs_with_nobody_waiting_and_the_checkpoint_survives_a_failure(log: Log) -> None:
    flusher = _flusher(log, FsyncMode.INTERVAL, interval=0.02, checkpoint=0.05)
    try:
        log.append(b"w" * 10)
        deadline = time.monotonic() + 10
        while (flusher.synced < 10 or log.checkpoints < 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flusher.synced == 10
        assert log.checkpoints >= 2  # the first one raised; the thread went on
    finally:
        flusher.stop()


def test_always_mode_does_not_sync_without_waiters(log: Log) -> None:
    flusher = _flusher(log, FsyncMode.ALWAYS, interval=0.01, checkpoint=60.0)
    try:
        log.append(b"v")
        time.sleep(0.1)
        assert flusher.syncs == 0 and flusher.synced == 0
    finally:
        flusher.stop()


def test_stop_syncs_the_waiters_left_and_refuses_new_ones(log: Log) -> None:
    flusher = Flusher(FsyncMode.NEVER, 60.0, 60.0, log.sync, log.checkpoint)
    flusher.start(0)
    waiting = flusher.durable(log.append(b"t"))
    flusher.stop()
    assert waiting.result(timeout=0) is None and flusher.synced == 1  # resolved before stop returned
    assert flusher.durable(1).done()  # at or below synced: nothing to wait for
    with pytest.raises(StoreClosed):
        flusher.durable(log.append(b"u")).result(timeout=1)


class SlowLog(Log):
    """A disk whose fsync takes 20 ms: long enough for every writer of a round to arrive within half
    of it on a loaded machine."""

    def sync(self) -> int:
        end = super().sync()
        time.sleep(0.02)
        return end


def test_writers_that_wait_for_their_fsync_share_one_per_round(tmp_path: Path) -> None:
    """Eight writers, each writing again once its write is durable (a connection publishing one
    message per request): each fsync waits for all eight (at most half an fsync's time), rather than
    starting with the first and leaving the others to the next. Then seven stop: the last one's
    writes still go through, the wait for the missing seven bounded."""
    log = SlowLog(tmp_path / "log")
    flusher = _flusher(log)
    rounds = 20
    done = [threading.Event() for _ in range(8)]

    def writer(k: int) -> None:
        for _ in range(rounds if k else 3 * rounds):
            flusher.durable(log.append(b"z" * 100)).result(timeout=10)
            if _ == rounds - 1:
                done[k].set()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    try:
        for t in threads:
            t.start()
        for event in done:
            assert event.wait(timeout=30)
        syncs = flusher.syncs
        assert syncs <= 1.5 * rounds, syncs  # about one per round; without waiting, two
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads) and flusher.synced == log.written
        assert flusher.syncs - syncs >= 2 * rounds - 2  # the last writer alone: one fsync each
    finally:
        flusher.stop()
        os.close(log.fd)


class CountingLoop(asyncio.SelectorEventLoop):
    """A real event loop that counts the calls made into it from other threads."""

    def __init__(self) -> None:
        super().__init__()
        self.threadsafe_calls = 0

    def call_soon_threadsafe(self, callback, *args, context=None):  # type: ignore[no-untyped-def,override]
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


class GatedLog(Log):
    """A log whose fsync waits until `gate` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()

    def sync(self) -> int:
        self.gate.wait(timeout=10)
        return super().sync()


def test_waiters_on_a_loop_are_called_there_together_once_their_fsync_is_done(tmp_path: Path) -> None:
    """when_durable: the callbacks one fsync ends on a loop run in that loop's thread, in one call
    made into it (one wake per fsync, however many wait); a failed fsync reaches them as their error."""
    log, loop = GatedLog(tmp_path / "log"), CountingLoop()
    flusher = Flusher(FsyncMode.ALWAYS, 60.0, 60.0, log.sync, log.checkpoint)
    flusher.start(0)
    called: list[tuple[int, BaseException | None, int]] = []

    def waiter(k: int) -> Callable[[BaseException | None], None]:
        return lambda error: called.append((k, error, threading.get_ident()))

    async def main() -> None:
        ends = [log.append(b"x" * 10) for _ in range(8)]
        assert all(flusher.when_durable(end, loop, waiter(k)) for k, end in enumerate(ends))
        log.gate.set()  # the first fsync covers all eight
        while len(called) < 8:
            await asyncio.sleep(0.001)
        log.fail_next = 1
        assert flusher.when_durable(log.append(b"y"), loop, waiter(8))
        while len(called) < 9:
            await asyncio.sleep(0.001)

    try:
        loop.run_until_complete(main())
        assert [k for k, _, _ in called] == list(range(9))
        assert {thread for _, _, thread in called} == {threading.get_ident()}  # the loop's thread
        assert all(error is None for _, error, _ in called[:8]) and isinstance(called[8][1], OSError)
        assert loop.threadsafe_calls == flusher.syncs == 2  # one call per fsync, not per waiter
        assert not flusher.when_durable(80, loop, waiter(9))  # fsynced already: nothing to wait for
    finally:
        log.gate.set()
        flusher.stop()
        loop.close()
    with pytest.raises(StoreClosed):
        flusher.when_durable(log.append(b"z"), loop, waiter(10))
    os.close(log.fd)
