"""The recovery point: a full file ``checkpoint`` and a journal ``checkpoint.journal`` of the
queues that changed since. All integers little-endian.

``checkpoint``, format version 2::

    0   8   magic          b"CMQCKPT1"
    8   2   version        u16 = 2
    10  2   reserved       u16
    12  4   n_queues       u32
    16  8   position       u64  global log position: the log below it is fsynced, and so is every
                                index entry of every record below it
    24  8   chunk_records  u64  records in position's chunk below position
    32  8   chunk_first_ts u64  first timestamp in that chunk (0 if none)
    40  8   written_ms     u64
    48  8   generation     u64  the journal that extends this file carries the same number
    56  28n queues         n x (queue id u32, first offset u64, next offset u64, bytes u64)
    ..  4   crc32          u32  of everything before it

Format version 1 (still read; never written) is the same without ``generation``: its queues start at
byte 48, and no journal extends it.

``checkpoint.journal``, format version 1: a header, then records appended one per recovery point::

    header  0   8   magic       b"CMQCKJNL"
            8   2   version     u16 = 1
            10  2   reserved    u16
            12  4   reserved    u32
            16  8   generation  u64  the full file it extends
            24  4   crc32       u32  of bytes 0..23
    record  0   8   position, chunk_records, chunk_first_ts, written_ms: u64 each, as in the full file
            32  4   n_queues    u32
            36  28n queues      the queues that changed, as in the full file; (first, next, bytes) =
                                (0, 0, 0) for a deleted queue
            ..  4   crc32       u32  of the record before it

Reading: the full file, then every valid record of a journal of the same generation, in order, each
replacing the header values and the queues it names; the first invalid record (a torn append) ends
the journal. A full file that fails its CRC is ignored (full log scan), journal and all.

Writing (``Writer``): a record holds only the queues that changed, appended and fdatasynced, so a
recovery point costs what changed since the last one. A full file is written on the first recovery
point after open, after a failed append, and when the journal has grown past the full file's size:
``checkpoint.tmp`` and a new, empty journal under a temporary name are written and fsynced, then
both renamed into place and the directory fsynced. A crash between the renames leaves a journal
whose generation is not the full file's: it is ignored, and the full file alone is the recovery point.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import files

MAGIC = b"CMQCKPT1"
VERSION = 2
HEADER_V1 = struct.Struct("<8sHHIQQQQ")
HEADER = struct.Struct("<8sHHIQQQQQ")
QUEUE = struct.Struct("<IQQQ")
CRC = struct.Struct("<I")
JOURNAL_MAGIC = b"CMQCKJNL"
JOURNAL_VERSION = 1
JOURNAL_HEADER = struct.Struct("<8sHHIQ")
RECORD = struct.Struct("<QQQQI")
JOURNAL = "checkpoint.journal"
MIN_JOURNAL_BYTES = 64 * 1024  # a journal this small is never worth a full rewrite


@dataclass(slots=True)
class Checkpoint:
    position: int
    chunk_records: int
    chunk_first_ts: int
    written_ms: int
    queues: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id -> (first, next, bytes)
    generation: int = 0


def _queues(cp: Checkpoint) -> bytes:
    return b"".join([QUEUE.pack(q, *v) for q, v in sorted(cp.queues.items())])


def encode(cp: Checkpoint) -> bytes:
    """The full file (version 2)."""
    body = HEADER.pack(MAGIC, VERSION, 0, len(cp.queues), cp.position, cp.chunk_records, cp.chunk_first_ts,
                       cp.written_ms, cp.generation) + _queues(cp)
    return body + CRC.pack(zlib.crc32(body))


def decode(raw: bytes) -> Checkpoint | None:
    """The checkpoint in a full file ``raw`` (version 1 or 2), or None if it is not a valid one."""
    if len(raw) < HEADER_V1.size + CRC.size or CRC.unpack_from(raw, len(raw) - 4)[0] != zlib.crc32(raw[:-4]):
        return None
    magic, version, _, n, position, records, first_ts, written = HEADER_V1.unpack_from(raw)
    if magic != MAGIC or version not in (1, VERSION):
        return None
    head, generation = HEADER_V1.size, 0
    if version == VERSION:
        if len(raw) < HEADER.size + CRC.size:
            return None
        head, generation = HEADER.size, HEADER.unpack_from(raw)[-1]
    if len(raw) != head + n * QUEUE.size + CRC.size:
        return None
    queues = {q: (a, b, c) for q, a, b, c in QUEUE.iter_unpack(raw[head:-4])}
    return Checkpoint(position, records, first_ts, written, queues, generation)


def journal_header(generation: int) -> bytes:
    head = JOURNAL_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION, 0, 0, generation)
    return head + CRC.pack(zlib.crc32(head))


def encode_record(cp: Checkpoint) -> bytes:
    """A journal record: the header values and the queues in ``cp`` (those that changed)."""
    body = RECORD.pack(cp.position, cp.chunk_records, cp.chunk_first_ts, cp.written_ms, len(cp.queues)) + _queues(cp)
    return body + CRC.pack(zlib.crc32(body))


def apply_journal(cp: Checkpoint, raw: bytes) -> int:
    """Apply the valid records of journal ``raw`` to ``cp`` when it extends cp's generation; returns
    how many were applied."""
    size = JOURNAL_HEADER.size
    if len(raw) < size + CRC.size or CRC.unpack_from(raw, size)[0] != zlib.crc32(raw[:size]):
        return 0
    magic, version, _, _, generation = JOURNAL_HEADER.unpack_from(raw)
    if magic != JOURNAL_MAGIC or version != JOURNAL_VERSION or generation != cp.generation or not generation:
        return 0
    p = size + CRC.size
    applied = 0
    while p + RECORD.size + CRC.size <= len(raw):
        position, records, first_ts, written, n = RECORD.unpack_from(raw, p)
        end = p + RECORD.size + n * QUEUE.size
        if end + CRC.size > len(raw) or CRC.unpack_from(raw, end)[0] != zlib.crc32(raw[p:end]):
            break  # a torn append: the records before it stand
        cp.position, cp.chunk_records, cp.chunk_first_ts, cp.written_ms = position, records, first_ts, written
        for q, a, b, c in QUEUE.iter_unpack(raw[p + RECORD.size : end]):
            if a or b or c:
                cp.queues[q] = (a, b, c)
            else:
                cp.queues.pop(q, None)
        applied += 1
        p = end + CRC.size
    return applied


def _write_new(path: Path, data: bytes) -> None:
    fd = files.create_file(path, os.O_WRONLY)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write(root: Path, cp: Checkpoint) -> None:
    """Write ``cp`` as the full file, with a new empty journal of its generation."""
    path = files.checkpoint_path(root)
    tmp = files.with_suffix(path, files.TMP_SUFFIX)
    journal = root / JOURNAL
    journal_tmp = files.with_suffix(journal, files.TMP_SUFFIX)
    _write_new(tmp, encode(cp))
    _write_new(journal_tmp, journal_header(cp.generation))
    os.replace(tmp, path)
    os.replace(journal_tmp, journal)
    files.fsync_dir(root)


def read(root: Path) -> Checkpoint | None:
    """The recovery point: the full file and its journal, or None without a valid full file."""
    try:
        cp = decode(files.checkpoint_path(root).read_bytes())
    except FileNotFoundError:
        return None
    if cp is not None and cp.generation:
        try:
            apply_journal(cp, (root / JOURNAL).read_bytes())
        except FileNotFoundError:
            pass
    return cp


class Writer:
    """Writes recovery points: journal records while it can, a full file when it must (module docstring).

    Not thread-safe: the store calls it under its flush lock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0  # 0: no full file written since open, the next write is one
        self.full_bytes = 0
        self.journal_bytes = 0
        self.full_writes = 0
        self.appends = 0
        self._fd = -1

    def wants_full(self) -> bool:
        return not self.generation or self.journal_bytes > max(self.full_bytes, MIN_JOURNAL_BYTES)

    def write_full(self, cp: Checkpoint) -> None:
        self.close()
        # Unique across restarts without reading the old file: a journal of an older full file never
        # matches the new one.
        cp.generation = max(time.time_ns(), self.generation + 1)
        self.generation = 0
        write(self.root, cp)
        self.generation, self.journal_bytes = cp.generation, 0
        self.full_bytes = HEADER.size + len(cp.queues) * QUEUE.size
        self.full_writes += 1

    def append(self, cp: Checkpoint) -> None:
        """Append a record of the queues in ``cp``; a failure makes the next write a full file."""
        data = encode_record(cp)
        try:
            if self._fd < 0:
                self._fd = os.open(self.root / JOURNAL, os.O_WRONLY | os.O_APPEND)
            done = 0
            while done < len(data):
                done += os.write(self._fd, memoryview(data)[done:])
            os.fdatasync(self._fd)
        except OSError:
            self.close()
            self.generation = 0  # the journal may end in a torn record: start a new generation
            raise
        self.journal_bytes += len(data)
        self.appends += 1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
