"""The collector (app/storage/gc.py): live-byte accounting, rewrites and merges, crash states."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from chunkmq.storage import NewMessage, Store, StoreOptions, files
from chunkmq.storage.gc import GC_SUFFIX
from tests.storage.conftest import SMALL
from tests.storage.crash_writer import OPTIONS, expected_gc_batch
from tests.storage.test_crash import ROOT

EVENTS, AUDIT = 1, 2


def _fill(store: Store, messages: int, every: int) -> list[tuple[int, int, bytes]]:
    """The issue's scenario, small: EVENTS gets most messages, AUDIT one after every ``every``.
    Returns AUDIT's (offset, position, data)."""
    audit = []
    events: list[NewMessage] = []
    for i in range(messages):
        if i % every == every - 1:
            data = b"audit-%d-" % i + b"a" * 60
            pos = store.append([*events, NewMessage(data, [AUDIT])]).positions[-1]
            audit.append((store.next_offset(AUDIT) - 1, pos, data))
            events = []
        else:
            events.append(NewMessage(b"e" * 100, [EVENTS]))
            if len(events) == 8:
                store.append(events)
                events = []
    store.append(events)
    return audit


def _sealed_file_bytes(store: Store) -> int:
    return sum(os.stat(c.path).st_blocks * 512 for c in store.chunks() if c.state == "sealed")


def _check_audit(store: Store, audit: list[tuple[int, int, bytes]]) -> None:
    # from the first expected offset: retention keeps whole chunks, so a floor may leave a few below it
    got = [(o, p, d) for o, p, _, _, _, d in store.read(AUDIT, audit[0][0] if audit else 0, 10_000)]
    assert got == audit  # same offsets, same positions (the message ids), same bytes, CRCs checked
    for _, pos, data in audit:
        assert store.read_at(pos).data == data


def test_live_bytes_follow_appends_floors_and_deletes(open_store: Callable[..., Store], tmp_path: Path) -> None:
    store = open_store()
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    _fill(store, 600, 10)
    sealed = [c for c in store.chunks() if c.state == "sealed"]
    assert len(sealed) > 5
    events_total = store.queue_bytes(EVENTS)
    assert sum(store.live_bytes().values()) == events_total + store.queue_bytes(AUDIT)
    # every chunk is full of live records, minus nothing
    for c in sealed:
        assert c.live_bytes == c.data_bytes
    store.set_first_offset(EVENTS, store.next_offset(EVENTS) // 2)
    assert sum(store.live_bytes().values()) == store.queue_bytes(EVENTS) + store.queue_bytes(AUDIT)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    live = store.live_bytes()
    assert sum(live.values()) == store.queue_bytes(AUDIT)
    assert all(c.live_bytes < c.data_bytes / 5 for c in store.chunks() if c.state == "sealed")
    store.flush()
    store.close()
    reopened = open_store()  # rebuilt from the indexes on open; floors come with the next retain
    reopened.retain({EVENTS: reopened.next_offset(EVENTS)})
    assert reopened.live_bytes() == live
    reopened.delete_queue(AUDIT)
    assert sum(reopened.live_bytes().values()) == 0


def test_collect_merges_sparse_chunks_and_keeps_ids(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    audit = _fill(store, 2000, 50)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    before = [c for c in store.chunks() if c.state == "sealed"]
    live = sum(c.live_bytes for c in before)
    assert _sealed_file_bytes(store) > 20 * live
    report = store.collect()
    after = [c for c in store.chunks() if c.state == "sealed"]
    assert report.rewrites >= 1 and len(after) < len(before) / 4
    assert all(c.rewritten for c in after)
    assert _sealed_file_bytes(store) <= 2 * live + 4096 * len(after)
    assert report.bytes_copied == live and report.bytes_freed > 0
    _check_audit(store, audit)
    assert store.verify() == []
    assert [r.position for r in store.scan() if AUDIT in dict(r.placements)] == [p for _, p, _ in audit]
    store.collect()  # a second pass finds nothing to do: the files are full of live records
    assert [c.number for c in store.chunks()] == [c.number for c in after] + [store.chunks()[-1].number]
    # appends, reopen and retention go on over rewritten files
    store.append([NewMessage(b"later", [AUDIT])])
    store.close()
    store = open_store()
    _check_audit(store, [*audit, (len(audit), store.read(AUDIT, len(audit), 1)[0][1], b"later")])
    store.retain({AUDIT: store.next_offset(AUDIT) - 1, EVENTS: store.next_offset(EVENTS)})
    assert [c.state for c in store.chunks()] == ["active"]


def test_the_issue_scenario_disk_within_twice_the_live_data(tmp_path: Path) -> None:
    """Issue 16, scaled down: events is consumed, audit keeps one message in 20; after retention
    and one pass the sealed chunk files take at most twice audit's live bytes (before: 20x)."""
    options = StoreOptions(chunk_size=64 * 1024, index_chunk_entries=1024)
    with Store.open(tmp_path / "store", options) as store:
        store.create_queue(EVENTS)
        store.create_queue(AUDIT)
        audit = _fill(store, 16_000, 20)
        store.retain({EVENTS: store.next_offset(EVENTS)})
        live = sum(c.live_bytes for c in store.chunks() if c.state == "sealed")
        assert _sealed_file_bytes(store) > 10 * live
        store.collect()
        sealed = [c for c in store.chunks() if c.state == "sealed"]
        assert 1 <= len(sealed) <= 2 * live / (0.5 * options.chunk_size) + 1  # the file-count bound
        assert _sealed_file_bytes(store) <= 2 * live
        _check_audit(store, audit)


def test_rewrite_again_after_more_consumption(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    audit = _fill(store, 2000, 4)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    store.collect()
    first = [c for c in store.chunks() if c.state == "sealed"]
    store.retain({AUDIT: int(len(audit) * 0.9)})
    store.collect()
    second = [c for c in store.chunks() if c.state == "sealed"]
    assert sum(c.file_bytes for c in second) < sum(c.file_bytes for c in first) / 2
    _check_audit(store, audit[int(len(audit) * 0.9):])


def test_a_reader_keeps_the_old_mmap(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    audit = _fill(store, 400, 10)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    _, pos, data = audit[0]
    old = store.chunk_map[pos // SMALL.chunk_size]
    inode = os.stat(old.path).st_ino
    store.collect()
    assert store.chunk_map[pos // SMALL.chunk_size] is not old
    assert not old.path.exists() or os.stat(old.path).st_ino != inode
    local = old.local_of(pos) + 64
    assert data in old.mm[local : local + 200]  # the old file is gone or replaced; its mapping still reads


def test_concurrent_appends_and_reads_during_collection(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    audit = _fill(store, 3000, 20)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    errors: list[BaseException] = []
    stop = threading.Event()

    def read_loop() -> None:
        try:
            while not stop.is_set():
                _check_audit(store, audit)
        except BaseException as exc:  # reported below
            errors.append(exc)

    reader = threading.Thread(target=read_loop)
    reader.start()
    for i in range(200):
        store.append([NewMessage(b"new-%d" % i, [EVENTS])])
        if i == 20:
            store.collect()
    stop.set()
    reader.join()
    assert not errors
    assert store.read(EVENTS, store.next_offset(EVENTS) - 1, 1)[0][5] == b"new-199"


def test_the_collector_thread_runs_after_retention(tmp_path: Path) -> None:
    options = StoreOptions(**{**_fields(SMALL), "gc_threshold": 0.5, "gc_duty": 1.0})
    with Store.open(tmp_path / "store", options) as store:
        store.create_queue(EVENTS)
        store.create_queue(AUDIT)
        audit = _fill(store, 2000, 50)
        store.retain({EVENTS: store.next_offset(EVENTS)})
        deadline = time.monotonic() + 10
        while not any(c.rewritten for c in store.chunks()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(c.rewritten for c in store.chunks())
        _check_audit(store, audit)


def _fields(options: StoreOptions) -> dict[str, object]:
    return {name: getattr(options, name) for name in options.__slots__}  # type: ignore[attr-defined]


def test_crash_states_of_a_rewrite(open_store: Callable[..., Store], tmp_path: Path) -> None:
    """What a kill -9 leaves at each step of gc.py's order of operations opens to the same store."""
    src = tmp_path / "store"
    store = open_store(src)
    store.create_queue(EVENTS)
    store.create_queue(AUDIT)
    audit = _fill(store, 1500, 30)
    store.retain({EVENTS: store.next_offset(EVENTS)})
    store.flush()
    before = tmp_path / "before"
    shutil.copytree(src, before)  # the files as the rewrite finds them (after step 0)
    report = store.collect()
    assert report.rewrites == 1
    number = report.chunks_replaced[0]
    store.close()
    rewritten = files.chunk_path(src, number)

    # killed in step 1: a complete (or partial) .gc.tmp next to the untouched sources
    step1 = tmp_path / "step1"
    shutil.copytree(before, step1)
    tmp = files.with_suffix(files.chunk_path(step1, number), GC_SUFFIX)
    shutil.copy(rewritten, tmp)
    with Store.open(step1, SMALL) as s:
        assert not tmp.exists() and not any(c.rewritten for c in s.chunks())
        _check_audit(s, audit)

    # killed after the commit (step 3) before the other sources were deleted (step 4)
    step3 = tmp_path / "step3"
    shutil.copytree(before, step3)
    shutil.copy(rewritten, files.chunk_path(step3, number))
    with Store.open(step3, SMALL) as s:
        assert sorted(s.recovery.replaced_deleted) == report.chunks_replaced[1:]
        assert [c.number for c in s.chunks() if c.state == "sealed"] == [number]
        _check_audit(s, audit)

    # a damaged moved table: the file is quarantined, never misread
    with open(rewritten, "r+b") as f:
        data_bytes = int.from_bytes(f.read(64 + SMALL.chunk_size + 16)[-8:], "little")
        f.seek(64 + ((data_bytes + 7) & ~7) + 30)
        f.write(b"\xff")
    with Store.open(src, SMALL) as s:
        assert s.recovery.quarantined == [number]
        end = (max(report.chunks_replaced) + 1) * SMALL.chunk_size
        assert [m[1] for m in s.read(AUDIT, 0, 100)] == [p for _, p, _ in audit if p >= end]


KILLS = 10


def _check_after_crash(store: Store, reported: set[int]) -> tuple[int, int]:
    """Queue 3 (never consumed) holds every message of every reported batch placed in it, whole
    batches only, in order, each read back with its CRC checked; queue 1 reads from its first
    offset without holes. Returns (next free batch id, rewritten files)."""
    assert store.verify() == []
    seen: dict[int, list[bytes]] = {}
    kept = store.read(3, 0, 1_000_000)
    assert [m[0] for m in kept] == list(range(store.next_offset(3)))
    for _, _, _, _, _, data in kept:
        seen.setdefault(int(data.split(b":", 1)[0]), []).append(data)
    for batch_id, datas in seen.items():
        assert datas == [m.data for m in expected_gc_batch(batch_id) if 3 in m.queues], f"batch {batch_id} partial"
    for batch_id in reported:
        if any(3 in m.queues for m in expected_gc_batch(batch_id)):
            assert batch_id in seen, f"acknowledged batch {batch_id} lost"
    consumed = store.read(1, 0, 1_000_000)
    assert [m[0] for m in consumed] == list(range(store.first_offset(1), store.next_offset(1)))
    ids = [int(m[5].split(b":", 1)[0]) for m in consumed]
    assert ids == sorted(ids)
    return max([*seen, *ids, *reported], default=-1) + 1, sum(c.rewritten for c in store.chunks())


def _wait_for_a_step(directory: Path, step: str, rng: random.Random) -> None:
    """Sleep a random while, or until the collector is copying (a .gc.tmp exists) or has just
    committed (the .gc.tmp was renamed): the kill then lands in that step of gc.py."""
    deadline = time.monotonic() + rng.uniform(0.02, 0.15)
    if step != "any":
        log = files.log_dir(directory)
        while time.monotonic() < deadline + 0.5 and not any(log.glob("*" + GC_SUFFIX)):
            time.sleep(0.0002)
        if step == "committed":
            while time.monotonic() < deadline + 0.5 and any(log.glob("*" + GC_SUFFIX)):
                pass
        return
    time.sleep(max(0.0, deadline - time.monotonic()))


def test_sigkill_during_collection(tmp_path: Path) -> None:
    """A real writer appends while its main thread consumes queue 1 and collects; SIGKILL at random."""
    directory = tmp_path / "store"
    rng = random.Random(11)
    reported: set[int] = set()
    next_id = 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    in_rewrite = rewritten = 0
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.crash_writer", str(directory), str(next_id), "gc"],
            stdout=subprocess.PIPE, cwd=ROOT, env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        _wait_for_a_step(directory, rng.choice(["any", "copying", "committed"]), rng)
        child.send_signal(signal.SIGKILL)
        child.wait()
        reported.update(int(line) for line in child.stdout.read().split())
        child.stdout.close()
        in_rewrite += any(files.log_dir(directory).glob("*" + GC_SUFFIX))  # killed in step 1
        with Store.open(directory, OPTIONS) as store:
            in_rewrite += bool(store.recovery.replaced_deleted)  # killed between steps 3 and 4
            next_id, rewritten = _check_after_crash(store, reported)
            next_id = max(next_id, *reported) + 1 if reported else next_id
    assert len(reported) > 50 and rewritten > 0
    print(f"kills in a rewrite: {in_rewrite} of {KILLS}")
