"""Read-only access to chunk files, for forensics and recovery (`chunkmq spark inspect`).

Opening a chunk here never writes, truncates or renames anything: the file is opened O_RDONLY and
read with pread, whatever state it is in (live, sealed, quarantined `.bad`, a store whose broker is
down or broken). Every record's CRC is checked with the codec of record.py; a damaged stretch is
reported and skipped by looking for the next valid record, so what follows it is still recovered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import files
from .chunk import FOOTER_SIZE, HEADER_SIZE, REWRITTEN, parse_footer, parse_header, parse_moved
from .model import Record
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


def _moved(region: bytes, data_bytes: int) -> dict[int, int]:
    """A rewritten chunk's moved table: data offset -> global position ({} if it is damaged)."""
    table = parse_moved(region, 0, data_bytes, len(region))
    if table is None:
        return {}
    positions, offsets, _ = table
    return dict(zip(offsets, positions, strict=True))


def read_chunk(path: Path) -> Iterator[Record | Damage]:
    """The records of one chunk file in order, with every damaged stretch between them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = read_head(fd)
        region = os.pread(fd, head.data_size, HEADER_SIZE)
    finally:
        os.close(fd)
    base = head.number * head.data_size
    moved = _moved(region, head.sealed_bytes) if head.rewritten and head.sealed_bytes is not None else None
    # A record ends with its non-zero length, so a live chunk's data ends before its trailing zeros
    # (the preallocated rest): the search past damage stops there
    # (a format-1 suffix's high bytes may be zero: 3 of them are given back).
    if head.sealed_bytes is None:
        limit = min(len(region), len(region.rstrip(b"\0")) + 3)
    else:
        limit = min(head.sealed_bytes, len(region))
    p, version = 0, head.version
    while p + FRAME <= limit:
        for off, n, *_ in iter_records(region, p, limit, version):
            # a rewritten chunk's records keep their positions (-1: its moved table is damaged)
            yield decode(region, off, base + off if moved is None else moved.get(off, -1), version)
            p = off + n
        if p + FRAME > limit:
            return
        if head.sealed_bytes is None and region[p] == 0 and not region[p:limit].strip(b"\0"):
            return  # nothing but zeros from here: the end of a live chunk's data
        q = _next_valid(region, p + 1, limit, version)
        yield Damage(base + p, q - p)
        p = q


def _next_valid(region: bytes, start: int, limit: int, version: int) -> int:
    """The next offset holding a valid record (or the limit): a slow byte-by-byte search, for damage only."""
    for q in range(start, limit):
        if record_length(region, q, limit, version):
            return q
    return limit
