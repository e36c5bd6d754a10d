"""The read-only chunk reader: every record back with its CRC checked, damage reported and skipped,
and the files never written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from chunkmq.storage import NewMessage, Store, StoreOptions
from chunkmq.storage.model import Record
from chunkmq.storage.reader import Damage, chunk_paths, read_chunk


def _fingerprint(paths: list[Path]) -> list[tuple[str, int, int, str]]:
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths]


def _store(tmp_path: Path, count: int) -> Path:
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=64 * 1024))
    store.create_queue(7)
    store.create_queue(8)
    for i in range(0, count, 50):
        store.append([NewMessage(b'"body":"m%d"' % j, [7, 8] if j % 10 == 0 else [7], tag=b"t" if j % 2 else b"",
                                 idempotency_key=b"k%d" % j) for j in range(i, min(i + 50, count))])
    store.close()
    return tmp_path / "store"


def test_reads_every_record_of_sealed_and_live_chunks_without_writing(tmp_path: Path) -> None:
    root = _store(tmp_path, 3000)
    paths = chunk_paths(root)
    assert len(paths) > 1  # sealed chunks and the live one
    before = _fingerprint(paths)
    records = [r for p in paths for r in read_chunk(p)]
    assert all(isinstance(r, Record) for r in records)
    assert [r.data for r in records] == [b'"body":"m%d"' % j for j in range(3000)]
    assert records[10].placements == [(7, 10), (8, 1)]
    assert records[3].tag == b"t" and records[3].idempotency_key == b"k3"
    assert [r.position for r in records] == sorted(r.position for r in records)
    assert _fingerprint(paths) == before  # opened read-only: not a byte, size or mtime changed


def test_damaged_record_is_reported_and_the_rest_recovered(tmp_path: Path) -> None:
    root = _store(tmp_path, 200)
    path = chunk_paths(root)[0]
    records = [r for r in read_chunk(path) if isinstance(r, Record)]
    victim = records[100]
    base = int(path.name.split(".")[0]) * 64 * 1024
    with open(path, "r+b") as f:  # flip one byte of record 100's payload: its CRC no longer matches
        f.seek(64 + victim.position - base + 20)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    items = list(read_chunk(path))
    damage = [d for d in items if isinstance(d, Damage)]
    assert len(damage) == 1 and damage[0].position == victim.position
    recovered = [r.data for r in items if isinstance(r, Record)]
    assert recovered == [r.data for r in records if r is not victim]


def test_broken_header_is_an_error_not_a_write(tmp_path: Path) -> None:
    root = _store(tmp_path, 10)
    path = chunk_paths(root)[0]
    with open(path, "r+b") as f:
        f.write(b"XX")
    before = _fingerprint([path])
    with pytest.raises(ValueError, match="chunk"):
        list(read_chunk(path))
    assert _fingerprint([path]) == before


def test_a_rewritten_chunk_gives_the_records_their_positions(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=16 * 1024))
    store.create_queue(7)
    store.create_queue(8)
    kept = {}
    for i in range(600):
        queues = [8] if i % 25 == 0 else [7]
        pos = store.append([NewMessage(b"m%d" % i + b"x" * 100, queues)]).positions[0]
        if queues == [8]:
            kept[pos] = b"m%d" % i + b"x" * 100
    store.retain({7: store.next_offset(7)})
    assert store.collect().rewrites == 1
    store.close()
    records = [r for p in chunk_paths(tmp_path / "store") for r in read_chunk(p)]
    assert {r.position: r.data for r in records if isinstance(r, Record) and r.placements[0][0] == 8} == kept


def test_windows_split_a_chunk_without_losing_or_repeating_a_record(tmp_path: Path) -> None:
    """Tasks of `chunkmq spark inspect` read windows of one chunk: together they give exactly what
    one read of the whole file gives, records and damage, whatever the window size."""
    root = _store(tmp_path, 3000)
    paths = chunk_paths(root)
    victim = [r for r in read_chunk(paths[0]) if isinstance(r, Record)][300]
    with open(paths[0], "r+b") as f:  # one damaged record, as above
        f.seek(64 + victim.position + 20)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    for path in paths:  # sealed chunks and the live one
        whole = list(read_chunk(path))
        for step in (97, 4096, 50_000):
            assert [x for s in range(0, 64 * 1024, step) for x in read_chunk(path, s, s + step)] == whole
    assert any(isinstance(x, Damage) for x in read_chunk(paths[0]))
