"""Queue index files (app/storage/queue_index.py) on real files, with tiny files (4 entries) so a
queue spans several: entries round-trip against a dict oracle, files are created at full size with a
checked header, damage is found on open, and the floor/bytes accounting matches a plain sum."""

from __future__ import annotations

import errno
import os
import random
import struct
from pathlib import Path

import pytest

from chunkmq.storage import files
from chunkmq.storage.errors import CorruptChunk
from chunkmq.storage.queue_index import (
    ENTRY_SIZE,
    HEADER_SIZE,
    IndexFile,
    QueueIndex,
    index_file_size,
    pack_entries,
    unpack_entries,
    used_entries,
)

CAP = 4
CHUNK = 1000  # positions per chunk number, for the per-chunk byte counts


def _flat(entries: list[tuple[int, int, int]]) -> list[int]:
    """[(position, length, tag hash)] as the flat list write() takes."""
    return [v for pos, length, th in entries for v in (pos + 1, length | th << 32)]


def _filled(root: Path, n: int, rng: random.Random) -> tuple[QueueIndex, dict[int, tuple[int, int, int]]]:
    index = QueueIndex(root, 7, CAP)
    oracle: dict[int, tuple[int, int, int]] = {}
    position, offset = 0, 0
    while offset < n:
        batch = []
        for _ in range(min(rng.randint(1, 6), n - offset)):
            length = rng.randint(32, 300)
            batch.append((position, length, rng.choice([0, 1, 2**32 - 1])))
            oracle[offset + len(batch) - 1] = (position + 1, length, batch[-1][2])
            position += length
        index.write(offset, _flat(batch))
        offset += len(batch)
    index.next = n
    return index, oracle


def test_pack_unpack_and_used_entries() -> None:
    flat = [1, 100 | 5 << 32, 2, 7, 0, 0, 9, 9]
    raw = pack_entries(flat)
    assert len(raw) == 4 * ENTRY_SIZE and unpack_entries(raw) == flat
    assert used_entries(raw) == 2  # up to the first empty entry
    assert index_file_size(CAP) == HEADER_SIZE + CAP * ENTRY_SIZE


def test_entries_round_trip_across_files_and_a_reopen(tmp_path: Path) -> None:
    rng = random.Random(11)
    index, oracle = _filled(tmp_path, 23, rng)
    assert sorted(index.files) == [0, 4, 8, 12, 16, 20]  # one file per CAP offsets
    for offset, expected in oracle.items():
        assert index.entry(offset) == expected
    assert index.entry(99) == (0, 0, 0)  # no file there
    assert index.raw(2, 5) == b"".join(struct.pack("<QII", *oracle[o]) for o in range(2, 7))
    assert index.bytes_between(3, 17) == sum(oracle[o][1] for o in range(3, 17))
    index.sync()
    index.close()
    again = QueueIndex(tmp_path, 7, CAP)
    assert again.load_files()
    again.first, again.next = 0, 23
    assert again.covers() and all(again.entry(o) == e for o, e in oracle.items())
    again.close()
    for path in files.queue_dir(tmp_path, 7).iterdir():
        assert path.stat().st_size == index_file_size(CAP)


def test_binary_search_and_bytes_per_chunk_match_a_scan(tmp_path: Path) -> None:
    index, oracle = _filled(tmp_path, 40, random.Random(5))
    for position in range(0, max(p for p, _, _ in oracle.values()) + 50, 97):
        expected = next((o for o in sorted(oracle) if oracle[o][0] - 1 >= position), 40)
        assert index.first_at_or_after(0, 40, position) == expected, position
    by_chunk: dict[int, int] = {}
    for p1, length, _ in oracle.values():
        by_chunk[(p1 - 1) // CHUNK] = by_chunk.get((p1 - 1) // CHUNK, 0) + length
    assert index.bytes_by_chunk(0, 40, CHUNK) == by_chunk
    index.recount(CHUNK)
    assert index.chunk_bytes == by_chunk
    index.raise_floor(10, CHUNK)
    left: dict[int, int] = {}
    for offset in range(10, 40):
        p1, length, _ = oracle[offset]
        left[(p1 - 1) // CHUNK] = left.get((p1 - 1) // CHUNK, 0) + length
    assert index.floor == 10 and index.chunk_bytes == left
    index.raise_floor(5, CHUNK)  # a floor never goes down
    assert index.floor == 10
    index.close()


def test_zero_from_clears_up_to_the_first_empty_entry(tmp_path: Path) -> None:
    index, _ = _filled(tmp_path, 10, random.Random(1))
    assert index.zero_from(6) == 4
    assert [index.entry(o)[0] > 0 for o in range(10)] == [True] * 6 + [False] * 4
    assert index.zero_from(6) == 0
    index.next = 6
    assert index.covers()
    index.next = 7
    assert not index.covers()  # the last entry is not set
    index.close()


def test_drop_files_below_keeps_the_file_holding_the_last_entry(tmp_path: Path) -> None:
    index, _ = _filled(tmp_path, 10, random.Random(2))
    assert index.drop_files_below(9) == (2, 2 * index_file_size(CAP))  # files 0 and 4 go; 8 holds next - 1
    assert sorted(index.files) == [8]
    assert sorted(p.name for p in files.queue_dir(tmp_path, 7).iterdir()) == [files.index_path(tmp_path, 7, 8).name]
    index.close()


def test_a_damaged_or_misnamed_file_is_found_on_open(tmp_path: Path) -> None:
    index, _ = _filled(tmp_path, 4, random.Random(3))
    index.close()
    path = files.index_path(tmp_path, 7, 0)
    with pytest.raises(CorruptChunk, match="does not match"):
        IndexFile.open(path, 8, 0, CAP)  # another queue's id
    raw = bytearray(path.read_bytes())
    raw[12] ^= 1  # the header's queue id: its CRC no longer matches
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunk, match="bad header"):
        IndexFile.open(path, 7, 0, CAP)
    assert QueueIndex(tmp_path, 7, CAP).load_files() is False  # the caller rebuilds from the log


def _entries(count: int) -> list[int]:
    """`count` set entries, flat as QueueIndex.write takes them (position + 1, length | tag hash << 32)."""
    return [v for i in range(count) for v in (i * 100 + 1, 100)]


@pytest.mark.parametrize("stale", [0, 1, 255, 256, 257, 3000])
def test_zero_from_clears_every_stale_entry_across_files(tmp_path: Path, stale: int) -> None:
    index = QueueIndex(tmp_path, queue_id=1, capacity=1024)
    index.write(0, _entries(10 + stale))  # 10 live entries, then `stale` ones past next (up to 3 files)
    try:
        assert index.zero_from(10) == stale
        assert [index.entry(o)[0] for o in range(10)] == [o * 100 + 1 for o in range(10)]
        assert all(index.entry(o)[0] == 0 for o in range(10, 10 + stale + 1))
        assert index.zero_from(10) == 0
    finally:
        index.close()


def test_writes_go_through_the_mapping_into_the_blocks_they_reserve(tmp_path: Path) -> None:
    """A write reserves the blocks it needs (what a pwrite would allocate, no more), and its entries
    are in the file for another descriptor at once."""
    files.queue_dir(tmp_path, 7).mkdir(parents=True)
    f = IndexFile.create(tmp_path, 7, 0, 1_000_000)
    try:
        f.write(0, pack_entries([1, 100]))
        assert f.reserved == (0, 4096)
        f.write(1, pack_entries([2, 100]))  # in the reserved block: no new reservation
        assert f.reserved == (0, 4096)
        f.write(253, pack_entries([3, 100, 4, 100]))  # 253 ends the first block, 254 starts the second
        assert f.reserved == (0, 8192)
        f.write(10_000, pack_entries([5, 100]))
        assert f.reserved == (39 * 4096, 40 * 4096)  # its entry is at byte 160,032
        assert f.path.stat().st_blocks * 512 <= 4 * 4096  # the header's block, the second and the one of 10,000
        with open(f.path, "rb") as raw:
            data = raw.read(HEADER_SIZE + 256 * ENTRY_SIZE)
        assert unpack_entries(data[HEADER_SIZE:HEADER_SIZE + 2 * ENTRY_SIZE]) == [1, 100, 2, 100]
        assert unpack_entries(data[HEADER_SIZE + 253 * ENTRY_SIZE:HEADER_SIZE + 255 * ENTRY_SIZE]) == [3, 100, 4, 100]
    finally:
        f.close()


def test_a_file_system_that_cannot_reserve_blocks_gets_pwrites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    files.queue_dir(tmp_path, 7).mkdir(parents=True)
    f = IndexFile.create(tmp_path, 7, 0, 64)
    try:
        f.write(3, pack_entries([5, 100]))
        assert not f.reservable and f.reserved == (0, 0)
        f.write(4, pack_entries([6, 100]))
        assert unpack_entries(f.raw(3, 2)) == [5, 100, 6, 100]
    finally:
        f.close()
