"""Durability (app/storage/store_durability.py): group commit and recovery points."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from chunkmq.storage import (
    FsyncMode,
    NewMessage,
    Store,
    StoreOptions,
)
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_durable_group_commit_with_concurrent_writers(open_store: Opener, tmp_path: Path) -> None:
    s = open_store(tmp_path / "always", StoreOptions(chunk_size=1 << 20, fsync=FsyncMode.ALWAYS))
    s.create_queue(1)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(50):
                s.append([NewMessage(f"{k}-{i}".encode(), [1])])
                s.durable(s.end_position).result(timeout=10)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert s.next_offset(1) == 200
    assert s._flusher.synced >= s.end_position
    assert s._flusher.syncs <= 200  # concurrent waiters shared fsyncs
    assert s.durable(0).done()


def test_durable_in_interval_mode_is_immediate(open_store: Opener, tmp_path: Path) -> None:
    s = open_store(tmp_path / "interval", StoreOptions(chunk_size=1 << 20, fsync_interval_ms=10))
    s.create_queue(1)
    s.append(msgs(1, 3))
    assert s.durable(s.end_position).done()


def test_a_recovery_point_writes_only_the_queues_that_changed(open_store: Opener, tmp_path: Path) -> None:
    from chunkmq.storage import checkpoint

    s = open_store()
    for q in range(1, 51):
        s.create_queue(q)
        s.append(msgs(q, 2))
    s.flush()  # a record of the 50 queues, after the full file the open wrote
    journal = s.root / checkpoint.JOURNAL
    size = journal.stat().st_size
    assert size == 28 + 36 + 50 * 28 + 4  # the header, then one record
    s.flush()
    assert journal.stat().st_size == size  # nothing changed: nothing written
    s.append(msgs(7, 3))
    s.set_first_offset(9, 1)
    s.flush()
    assert journal.stat().st_size == size + 36 + 2 * 28 + 4  # one record: queues 7 and 9 only
    s.delete_queue(11)  # flushes: queue 11 leaves the recovery point
    # the full file and its journal give what a full recovery point of the live store holds
    live = {q: (s.first_offset(q), s.next_offset(q), s.queue_bytes(q)) for q in s.queue_ids()}
    cp = checkpoint.read(s.root)
    assert cp is not None and cp.queues == live and cp.position == s.end_position
    crashed = open_store(shutil.copytree(s.root, tmp_path / "crashed"))
    assert crashed.recovery.checkpoint_found and crashed.recovery.records_replayed == 0
    assert {q: (crashed.first_offset(q), crashed.next_offset(q), crashed.queue_bytes(q))
            for q in crashed.queue_ids()} == live


def test_when_durable_calls_back_on_the_loop_after_the_fsync_in_fsync_always_only(tmp_path: Path) -> None:
    always = Store.open(tmp_path / "always", StoreOptions(fsync=FsyncMode.ALWAYS))
    interval = Store.open(tmp_path / "interval", StoreOptions(fsync=FsyncMode.INTERVAL))

    async def publish(s: Store) -> tuple[bool, list[BaseException | None]]:
        s.create_queue(1)
        s.publish_one(b"x", 1)
        called: list[BaseException | None] = []
        waits = s.when_durable(s.end_position, asyncio.get_running_loop(), called.append)
        for _ in range(1000):
            if called or not waits:
                break
            await asyncio.sleep(0.01)
        return waits, called

    assert asyncio.run(publish(always)) == (True, [None])
    assert always._flusher.synced >= always.end_position
    assert asyncio.run(publish(interval)) == (False, [])  # durable by the interval's fsync, not awaited
    always.close()
    interval.close()
