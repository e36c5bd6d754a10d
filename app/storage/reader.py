"""Read-only access to chunk files, for forensics and recovery (`chunkmq spark inspect`).

Opening a chunk here never writes, truncates or renames anything: the file is opened O_RDONLY and
read with pread, whatever state it is in (live, sealed, quarantined `.bad`, a store whose broker is
down or broken). Every record's CRC is checked with the codec of record.py; a damaged stretch is
reported and skipped by looking for the next valid record, so what follows it is still recovered.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import files
from .chunk import FOOTER_SIZE, HEADER_SIZE, REWRITTEN, parse_footer, parse_header, parse_moved
from .model import ReadBuffer, Record
from .record import FRAME, decode, iter_records, record_length


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes [start, end) of a chunk's data region that hold no valid record."""

    position: int  # global position of the first damaged byte
    length: int


@dataclass(frozen=True, slots=True)
class ChunkHead:
    number: int
    data_size: int
    created_ms: int
    sealed_bytes: int | None  # data bytes named by a valid footer; None while the chunk is live
    rewritten: bool = False  # written by the collector: positions come from its moved table
    version: int = 2  # record format of the chunk's records


_BLOCK = 1 << 20  # bytes read at a time looking for the end of a live chunk's data


def chunk_paths(store_dir: Path) -> list[Path]:
    """Every chunk file of a store directory (live, sealed and quarantined), in log order."""
    log = files.log_dir(store_dir)
    if not log.is_dir():
        return []
    found = [p for p in log.iterdir()
             if p.name.endswith((files.CHUNK_SUFFIX, files.CHUNK_SUFFIX + files.BAD_SUFFIX))]
    return sorted(found, key=lambda p: p.name)


def read_head(fd: int) -> ChunkHead:
    """The chunk's header and, when it is sealed, its footer; raises ValueError for a bad header."""
    try:
        version, flags, number, data_size, created = parse_header(os.pread(fd, HEADER_SIZE, 0))
    except ValueError as exc:
        raise ValueError(f"not a readable chunk file: {exc}") from None
    footer = parse_footer(os.pread(fd, FOOTER_SIZE, HEADER_SIZE + data_size))
    sealed = footer.data_bytes if footer is not None else None
    return ChunkHead(number, data_size, created, sealed, bool(flags & REWRITTEN), version)


def _moved(region: ReadBuffer, data_bytes: int) -> dict[int, int]:
    """A rewritten chunk's moved table: data offset -> global position ({} if it is damaged)."""
    table = parse_moved(region, 0, data_bytes, len(region))
    if table is None:
        return {}
    positions, offsets, _ = table
    return dict(zip(offsets, positions, strict=True))


def data_end(region: ReadBuffer) -> int:
    """One past the last non-zero byte of a data region (0 if all zeros), read backwards in blocks."""
    end = len(region)
    while end > 0:
        block = bytes(region[max(0, end - _BLOCK) : end]).rstrip(b"\0")
        if block:
            return end - _BLOCK + len(block) if end > _BLOCK else len(block)
        end -= _BLOCK
    return 0


def chunk_head(path: Path) -> ChunkHead:
    """The header (and footer) of a chunk file; ValueError if they cannot be read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_head(fd)
    finally:
        os.close(fd)


def read_chunk(path: Path, start: int = 0, end: int | None = None) -> Iterator[Record | Damage]:
    """The records of one chunk file in order, with every damaged stretch between them: those that
    start in ``[start, end)`` of the data region (the whole file by default).

    The file is mapped read-only, so its pages are read as the records are decoded and the kernel
    may drop them behind: a chunk is never copied into memory whole. A window that does not start
    at 0 begins at the first valid record at or after ``start`` (as after damage), so windows
    next to each other split a chunk between tasks without losing or repeating a record."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = read_head(fd)
        size = os.fstat(fd).st_size
        # The mapping lives as long as this generator (an explicit close would fail while a slice
        # of it is referenced); the descriptor is not needed for it.
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size > HEADER_SIZE else b""
    finally:
        os.close(fd)
    region = memoryview(mapped)[HEADER_SIZE : HEADER_SIZE + head.data_size]
    base = head.number * head.data_size
    moved = _moved(region, head.sealed_bytes) if head.rewritten and head.sealed_bytes is not None else None
    # A record ends with its non-zero length, so a live chunk's data ends before its trailing zeros
    # (the preallocated rest): the search past damage stops there
    # (a format-1 suffix's high bytes may be zero: 3 of them are given back).
    if head.sealed_bytes is None:
        zeros_from = data_end(region)
        limit = min(len(region), zeros_from + 3)
    else:
        zeros_from = limit = min(head.sealed_bytes, len(region))
    stop = limit if end is None else min(end, limit)
    version = head.version
    if start >= stop:
        return
    p = start if start == 0 else _next_valid(region, start, limit, version)
    while p < stop and p + FRAME <= limit:
        for off, n, *_ in iter_records(region, p, limit, version):
            if off >= stop:
                return
            # a rewritten chunk's records keep their positions (-1: its moved table is damaged)
            yield decode(region, off, base + off if moved is None else moved.get(off, -1), version)
            p = off + n
        if p >= stop or p + FRAME > limit:
            return
        if head.sealed_bytes is None and p >= zeros_from:
            return  # nothing but zeros from here: the end of a live chunk's data
        q = _next_valid(region, p + 1, limit, version)
        yield Damage(base + p, q - p)
        p = q


def _next_valid(region: ReadBuffer, start: int, limit: int, version: int) -> int:
    """The next offset holding a valid record (or the limit): a slow byte-by-byte search, for damage only."""
    for q in range(start, limit):
        if record_length(region, q, limit, version):
            return q
    return limit
