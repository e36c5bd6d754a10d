"""A real full disk: a 1 MiB tmpfs (the tests run as root), no mocks."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from chunkmq.api.errors import api_error
from chunkmq.storage import FsyncMode, NewMessage, StorageFull, Store, StoreOptions
from chunkmq.wire import codes

OPTIONS = StoreOptions(
    chunk_size=64 * 1024,
    index_chunk_entries=256,
    fsync=FsyncMode.ALWAYS,
    checkpoint_interval_ms=3_600_000,
    max_batch_bytes=64 * 1024,
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _batch(i: int) -> list[NewMessage]:
    return [NewMessage(f"{i}-{k}-".encode() + b"z" * 400, [k % 3]) for k in range(20)]


def test_disk_full_leaves_the_store_consistent(small_disk: Path) -> None:
    s = Store.open(small_disk / "store", OPTIONS)
    for q in range(3):
        s.create_queue(q)
    stored = 0
    with pytest.raises(StorageFull) as info:
        while True:
            s.append(_batch(stored))
            s.durable(s.end_position).result()
            stored += 1
    error = api_error(info.value)  # the API's one map: 507 storage_full
    assert (error.code, error.status) == (codes.STORAGE_FULL, 507)
    assert stored > 5
    end = s.end_position
    nexts = [s.next_offset(q) for q in range(3)]
    # the failed batch is not visible, and a retry fails the same clean way
    with pytest.raises(StorageFull):
        s.append(_batch(stored))
    assert s.end_position == end and [s.next_offset(q) for q in range(3)] == nexts
    assert sum(len(s.read(q, 0, 10_000)) for q in range(3)) == stored * 20
    # free space: the consumers are done with everything, retention deletes sealed chunks
    report = s.retain({q: s.next_offset(q) for q in range(3)})
    assert report.chunks_deleted
    s.append(_batch(stored))
    s.close()
    # after a restart, exactly the stored batches are there (plus the one after the cleanup)
    r = Store.open(small_disk / "store", OPTIONS)
    assert [r.next_offset(q) for q in range(3)] == [n + c for n, c in zip(nexts, (7, 7, 6), strict=True)]
    assert r.read(0, nexts[0], 1)[0][-1].startswith(f"{stored}-0-".encode())
    r.close()


def test_disk_full_inside_an_index_write(small_disk: Path) -> None:
    """Chunk space is reserved up front, so fill the disk with index files: many queues."""
    options = StoreOptions(chunk_size=64 * 1024, index_chunk_entries=4096, fsync=FsyncMode.NEVER,
                           checkpoint_interval_ms=3_600_000)
    s = Store.open(small_disk / "store", options)
    queues = list(range(400))
    for q in queues:
        s.create_queue(q)
    appended = 0
    with pytest.raises(StorageFull):
        for q in queues:
            s.append([NewMessage(b"x", [q])])
            appended += 1
    end = s.end_position
    assert 0 < appended < len(queues)
    s.close()
    r = Store.open(small_disk / "store", options)
    assert r.end_position == end
    assert sum(r.next_offset(q) for q in queues) == appended
    assert [rec.placements[0][0] for rec in r.scan()] == queues[:appended]
    r.close()
