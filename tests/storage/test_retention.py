from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from chunkmq.storage import NewMessage, Store, retention
from chunkmq.storage.queue_index import QueueIndex
from tests.storage.conftest import SMALL, msgs

Opener = Callable[..., Store]
PAD = "p" * 60  # ~110-byte records: 60 batches of 5 fill several 8 KiB chunks


def _log_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "log").iterdir())


def test_chunks_deleted_only_when_every_queue_is_past_them(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    s.create_queue(1)
    s.create_queue(2)
    s.append([NewMessage(b"slow-0", [2])])  # queue 2 holds one old message in chunk 0
    for i in range(60):
        s.append(msgs(1, 5, prefix=f"fast{i}" + PAD))
    chunks = [c.number for c in s.chunks()]
    assert len(chunks) >= 4
    report = s.retain({1: s.next_offset(1), 2: 0})
    # queue 2 still needs chunk 0; chunks only queue 1 used are gone; the last chunk always stays
    assert 0 not in report.chunks_deleted
    assert report.chunks_deleted == chunks[1:-1]
    assert report.bytes_freed > 0
    assert [c.number for c in s.chunks()] == [0, chunks[-1]]
    assert s.read(2, 0, 1)[0][-1] == b"slow-0"
    # queue 1's first records share chunk 0 with queue 2, but the floor only moves past gaps:
    # everything from first_offset on is readable, without holes
    first = s.first_offset(1)
    assert first > 0 and report.first_offsets[1] == first
    assert [offset for offset, *_ in s.read(1, 0, 1000)] == list(range(first, s.next_offset(1)))
    report = s.retain({2: 1})
    assert report.chunks_deleted == [0]
    assert s.first_offset(2) == 1


def test_floor_only_moves_to_the_lowest_readable_offset(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for i in range(60):
        s.append(msgs(1, 5, prefix=f"m{i}" + PAD))
    floor = 150
    s.retain({1: floor})
    first = s.first_offset(1)
    assert 0 < first <= floor
    # everything from the new first offset is readable, nothing below it is
    got = s.read(1, 0, 1000)
    assert got[0][0] == first and len(got) == 300 - first


def test_index_files_below_the_floor_are_deleted(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    s.create_queue(1)
    for i in range(20):
        s.append(msgs(1, 8, prefix=f"m{i}"))
    qdir = tmp_path / "store" / "queues" / f"{1:010d}"
    before = len(list(qdir.iterdir()))
    report = s.retain({1: 100})
    assert report.index_files_deleted == len(range(0, s.first_offset(1) - 15, SMALL.index_chunk_entries))
    assert len(list(qdir.iterdir())) == before - report.index_files_deleted
    assert s.read(1, 0, 1)[0][0] == s.first_offset(1)
    s.close()
    r = open_store()
    assert r.first_offset(1) == s.first_offset(1)  # the moved floor is durable
    assert len(r.read(1, 0, 1000)) == 160 - r.first_offset(1)


def test_a_consumed_queues_newest_index_file_gives_its_dead_entries_back(open_store: Opener, tmp_path: Path) -> None:
    """The file holding next - 1 is never deleted; one retention pass after the floor passed its
    entries, their blocks are punched out (the header's block stays), and the queue goes on."""
    options = replace(SMALL, index_chunk_entries=4096)
    s = open_store(options=options)
    s.create_queue(1)
    for i in range(20):
        s.append(msgs(1, 200, prefix=f"m{i}"))
    [index] = (tmp_path / "store" / "queues" / f"{1:010d}").iterdir()
    allocated = os.stat(index).st_blocks * 512
    assert allocated >= 4000 * 16  # 4,000 entries written
    end = s.next_offset(1)
    s.retain({1: end})  # consumed: every sealed chunk goes; the file holds next - 1 and stays
    first = s.first_offset(1)  # the active chunk's records stay readable
    # nothing given back yet (the file system may take a block for the file's extent tree)
    assert end - 200 <= first < end and os.stat(index).st_blocks * 512 >= allocated
    report = s.retain({1: end})  # one pass later the entries below first are punched out
    below_first = (32 + first * 16) // 4096 - 1  # whole blocks of entries below first, the header's block aside
    # what stays: the header's block and those of [first, end) (one block of slack for the extent tree)
    assert below_first >= 10 and report.bytes_freed >= (below_first - 1) * 4096 and report.chunks_deleted == []
    assert [p.name for p in index.parent.iterdir()] == [index.name]
    s.append(msgs(1, 3, prefix="after"))
    assert [m[0] for m in s.read(1, 0, 10_000)] == list(range(first, end + 3))
    s.close()
    r = open_store(options=options)  # the holes read as empty entries below the durable floor
    assert r.first_offset(1) == first and [m[0] for m in r.read(1, 0, 10_000)] == list(range(first, end + 3))
    assert r.verify() == []


def test_free_bytes_deletes_oldest_needed_chunks_and_reports_lost_messages(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for i in range(60):
        s.append(msgs(1, 5, prefix=f"m{i}" + PAD))
    n_chunks = len(s.chunks())
    per_chunk = os.stat(s.chunks()[0].path).st_blocks * 512
    assert s.retain({}).chunks_deleted == []  # every chunk is needed: nothing goes without free_bytes
    report = s.retain({}, free_bytes=(n_chunks - 2) * per_chunk)
    assert len(report.chunks_deleted) == n_chunks - 2
    dropped, dropped_bytes = report.dropped[1]
    assert dropped == s.first_offset(1) > 0 and dropped_bytes > 0
    assert s.read(1, 0, 1)[0][0] == s.first_offset(1)


def test_deleted_queue_does_not_hold_chunks(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    s.create_queue(2)
    for i in range(60):
        s.append(msgs(1 + i % 2, 5, prefix=f"m{i}" + PAD))
    s.delete_queue(2)
    assert s.queue_ids() == [1]
    report = s.retain({1: s.next_offset(1)})
    assert len(report.chunks_deleted) == len(s.chunks()) + len(report.chunks_deleted) - 1
    s.create_queue(2)  # the same id again starts empty, even after a restart
    s.close()
    r = open_store()
    assert r.next_offset(2) == 0 and r.read(2, 0, 10) == []


def test_retain_while_appending_from_another_thread(open_store: Opener) -> None:
    import threading

    s = open_store()
    s.create_queue(1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            while not stop.is_set():
                s.append(msgs(1, 5, prefix="bg"))
                stop.wait(0.0005)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=appender)
    t.start()
    try:
        for _ in range(30):
            s.retain({1: max(0, s.next_offset(1) - 20)})
            got = s.read(1, 0, 50)
            assert got[0][0] == s.first_offset(1)
            assert [offset for offset, *_ in got] == list(range(got[0][0], got[0][0] + len(got)))
    finally:
        stop.set()
        t.join()
    assert not errors


def test_retain_given_only_changed_floors_equals_retain_given_every_floor(open_store: Opener, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Two stores with the same history: one is given every queue's floor each round (the full round),
    # the other only the floors that changed since its previous round (the broker's rounds).
    full, incremental = open_store(tmp_path / "full"), open_store(tmp_path / "incremental")
    queues = range(1, 9)
    for s in (full, incremental):
        for q in queues:
            s.create_queue(q)
        for i in range(40):
            s.append([NewMessage(f"m{i}{PAD}".encode(), [q]) for q in queues if (i + q) % 3])
    floors = {q: 0 for q in queues}
    calls: list[int] = []
    lowest = retention._lowest_readable

    def counted(store: object, qi: QueueIndex, upto: int) -> int:
        calls.append(qi.queue_id)
        return lowest(store, qi, upto)  # type: ignore[arg-type]

    monkeypatch.setattr(retention, "_lowest_readable", counted)
    for step in range(6):
        changed = {q: min(full.next_offset(q), floors[q] + 4 * step) for q in queues if q % 3 == step % 3}
        floors.update(changed)
        expected = full.retain(dict(floors))
        calls.clear()
        got = incremental.retain(changed)
        assert got == expected, step
        assert [c.number for c in incremental.chunks()] == [c.number for c in full.chunks()]
        assert all(incremental.first_offset(q) == full.first_offset(q) for q in queues)
        if not got.chunks_deleted:  # only the queues given a floor were looked at
            assert set(calls) <= set(changed)
    calls.clear()
    assert incremental.retain({}) == retention.RetentionReport() and not calls  # nothing changed: nothing done
