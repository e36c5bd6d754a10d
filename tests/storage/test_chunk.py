"""Log chunk files (app/storage/chunk.py) on real files: created whole with a checked header, written,
rolled back and sealed with a footer that a reopen reads; damaged or mismatched files are refused,
a truncated one is extended with zeros, and a scan of a store's chunk finds its records. The active
chunk is written through a mapping of its reserved blocks, and a killed writer loses none of it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chunkmq.storage import NewMessage, Store, files
from chunkmq.storage.chunk import FOOTER_SIZE, HEADER_SIZE, Chunk, parse_footer, parse_header
from chunkmq.storage.errors import CorruptChunk, StorageError
from chunkmq.storage.record import VERSION

SIZE = 4096


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """A store's root, with the directory its chunk files go in."""
    files.chunk_path(tmp_path, 0).parent.mkdir()
    return tmp_path


def test_create_writes_a_valid_header_at_full_size_and_no_temporary(tmp_path: Path) -> None:
    chunk = Chunk.create(tmp_path, 3, SIZE, created_ms=1234)
    try:
        assert chunk.path == files.chunk_path(tmp_path, 3)
        assert [p.name for p in chunk.path.parent.iterdir()] == [chunk.path.name]
        assert chunk.path.stat().st_size == HEADER_SIZE + SIZE + FOOTER_SIZE == chunk.file_bytes
        assert parse_header(chunk.path.read_bytes()) == (VERSION, 0, 3, SIZE, 1234)
        assert chunk.base == 3 * SIZE and chunk.end == 4 * SIZE and chunk.local_of(3 * SIZE + 10) == 10
        assert not chunk.read_footer() and not chunk.sealed
    finally:
        chunk.close()


def test_write_read_rollback_and_seal_survive_a_reopen(tmp_path: Path) -> None:
    chunk = Chunk.create(tmp_path, 0, SIZE, created_ms=1)
    chunk.write(0, b"abcdef")
    chunk.write(6, b"ghij")
    assert chunk.read(0, 10) == b"abcdefghij" and chunk.writes == 2
    chunk.rollback(6, 10)
    assert chunk.read(0, 10) == b"abcdef\0\0\0\0"
    chunk.data_bytes, chunk.records, chunk.first_ts, chunk.last_ts = 6, 1, 100, 200
    chunk.seal(now_ms=300)
    chunk.sync()
    chunk.close()
    footer = parse_footer(chunk.path.read_bytes()[HEADER_SIZE + SIZE:])
    assert footer == (6, 1, 100, 200)
    again = Chunk.open(chunk.path, 0, SIZE)
    try:
        assert again.read_footer() and again.sealed
        assert (again.data_bytes, again.records, again.first_ts, again.last_ts) == (6, 1, 100, 200)
        assert again.read(0, 6) == b"abcdef"
    finally:
        again.close()


def test_a_damaged_or_mismatched_file_is_refused(tmp_path: Path) -> None:
    Chunk.create(tmp_path, 2, SIZE, created_ms=1).close()
    path = files.chunk_path(tmp_path, 2)
    with pytest.raises(CorruptChunk, match="header says chunk 2"):
        Chunk.open(path, 5, SIZE)
    with pytest.raises(StorageError, match="chunk_size=8192"):
        Chunk.open(path, 2, 2 * SIZE)
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0xFF  # inside the CRC-covered header
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunk, match="CRC"):
        Chunk.open(path, 2, SIZE)
    path.write_bytes(b"NOTCHUNK" + bytes(100))
    with pytest.raises(CorruptChunk, match="bad magic"):
        Chunk.open(path, 2, SIZE)
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with pytest.raises(CorruptChunk):
            Chunk.open(path, 2, SIZE)
    assert len(os.listdir("/proc/self/fd")) == fds  # a refused file's descriptor is closed


def test_a_truncated_file_is_extended_and_its_lost_part_reads_as_zeros(tmp_path: Path) -> None:
    chunk = Chunk.create(tmp_path, 0, SIZE, created_ms=1)
    chunk.write(0, b"x" * 1000)
    chunk.close()
    os.truncate(chunk.path, HEADER_SIZE + 500)
    again = Chunk.open(chunk.path, 0, SIZE)
    try:
        assert chunk.path.stat().st_size == HEADER_SIZE + SIZE + FOOTER_SIZE
        assert again.read(0, 1000) == b"x" * 500 + bytes(500)
    finally:
        again.close()


def test_scan_finds_the_records_a_store_wrote(tmp_path: Path, open_store: Callable[..., Store]) -> None:
    store = open_store(tmp_path / "store")  # the store makes its own directories
    store.create_queue(1)
    for i in range(3):
        store.append([NewMessage(f"m{i}-{j}".encode(), [1]) for j in range(4)])
    chunk_size = store.options.chunk_size
    store.close()
    [(number, path)] = files.list_chunks(tmp_path / "store")
    chunk = Chunk.open(path, number, chunk_size)
    try:
        batch_end, records, first_ts, last_ts, scan_end = chunk.scan(0, chunk_size)
        assert records == 12 and batch_end == scan_end > 0 and 0 < first_ts <= last_ts
        assert chunk.data_extent(0) == scan_end
        assert chunk.data_extent(scan_end) == scan_end  # a clean tail: nothing after the last record
        assert not chunk.valid_record_after(scan_end, chunk_size)
    finally:
        chunk.close()


def test_a_new_chunk_is_written_through_its_mapping_until_sealed(tmp_path: Path) -> None:
    """Its blocks are reserved, so appends are copies into the mapping: another descriptor reads them
    at once, and sealing ends the writable mapping."""
    chunk = Chunk.create(tmp_path, 0, SIZE, created_ms=1)
    try:
        assert chunk.wm is not None
        chunk.write(0, b"mapped")
        with open(chunk.path, "rb") as f:
            assert f.read()[HEADER_SIZE : HEADER_SIZE + 6] == b"mapped"
        chunk.data_bytes = 6
        chunk.seal(now_ms=2)
        assert chunk.wm is None
    finally:
        chunk.close()


def test_a_chunk_whose_blocks_cannot_be_reserved_is_written_with_pwrite(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system without fallocate: no writable mapping (a store into a hole could die of SIGBUS)."""
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    chunk = Chunk.create(tmp_path, 0, SIZE, created_ms=1)
    try:
        chunk.map_writes()
        assert chunk.wm is None
        chunk.write(0, b"written")
        assert chunk.read(0, 7) == b"written"
    finally:
        chunk.close()


_KILLED_WRITER = """
import sys, time
from pathlib import Path
from chunkmq.storage.chunk import Chunk
chunk = Chunk.open(Path(sys.argv[1]), 0, int(sys.argv[2]))
chunk.map_writes()
assert chunk.wm is not None
chunk.write(0, b"kept after kill -9")
print("written", flush=True)
time.sleep(60)
"""


def test_what_a_killed_process_wrote_through_the_mapping_is_in_the_file(tmp_path: Path) -> None:
    """kill -9 right after the copy: the pages are the file's own, nothing waits in the process."""
    Chunk.create(tmp_path, 0, SIZE, created_ms=1).close()
    path = files.chunk_path(tmp_path, 0)
    writer = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path), str(SIZE)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"written\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    again = Chunk.open(path, 0, SIZE)
    try:
        assert again.read(0, 18) == b"kept after kill -9"
    finally:
        again.close()


@pytest.mark.parametrize("garbage_at", [0, 5, (1 << 20) - 1, 1 << 20, (1 << 20) + 7, 3 << 20])
def test_data_extent_finds_the_last_non_zero_byte_up_to_a_zero_mib(tmp_path: Path, garbage_at: int) -> None:
    """The tail recovery cuts: everything up to the last non-zero byte before the first MiB that is all
    zeros; a clean tail is its start."""
    chunk = Chunk.create(tmp_path, 0, 4 << 20, 0)
    try:
        assert chunk.data_extent(100) == 100
        with open(chunk.path, "r+b") as f:  # a torn write past the data (the map is read-only)
            f.seek(HEADER_SIZE + 100 + garbage_at)
            f.write(b"\x07")
        expected = 100 + garbage_at + 1 if garbage_at < 1 << 20 else 100  # a zero MiB first ends the search
        assert chunk.data_extent(100) == expected
    finally:
        chunk.close()
