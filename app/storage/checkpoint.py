"""The recovery point file ``checkpoint`` (format version 1), all integers little-endian::

    0   8   magic          b"CMQCKPT1"
    8   2   version        u16 = 1
    10  2   reserved       u16
    12  4   n_queues       u32
    16  8   position       u64  global log position: the log below it is fsynced, and so is every
                                index entry of every record below it
    24  8   chunk_records  u64  records in position's chunk below position
    32  8   chunk_first_ts u64  first timestamp in that chunk (0 if none)
    40  8   written_ms     u64
    48  28n queues         n x (queue id u32, first offset u64, next offset u64, bytes u64)
    ..  4   crc32          u32  of everything before it

Written to ``checkpoint.tmp``, fsynced, renamed over ``checkpoint``, directory fsynced: a reader sees
the old or the new file, never a mix. A file that fails its CRC is ignored (full log scan).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import files

MAGIC = b"CMQCKPT1"
VERSION = 1
HEADER = struct.Struct("<8sHHIQQQQ")
QUEUE = struct.Struct("<IQQQ")
CRC = struct.Struct("<I")


@dataclass(slots=True)
class Checkpoint:
    position: int
    chunk_records: int
    chunk_first_ts: int
    written_ms: int
    queues: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id -> (first, next, bytes)


def encode(cp: Checkpoint) -> bytes:
    parts = [HEADER.pack(MAGIC, VERSION, 0, len(cp.queues), cp.position, cp.chunk_records,
                         cp.chunk_first_ts, cp.written_ms)]
    parts += [QUEUE.pack(q, *v) for q, v in sorted(cp.queues.items())]
    body = b"".join(parts)
    return body + CRC.pack(zlib.crc32(body))


def decode(raw: bytes) -> Checkpoint | None:
    """The checkpoint in ``raw``, or None if it is not a valid one."""
    if len(raw) < HEADER.size + CRC.size or CRC.unpack_from(raw, len(raw) - 4)[0] != zlib.crc32(raw[:-4]):
        return None
    magic, version, _, n, position, records, first_ts, written = HEADER.unpack_from(raw)
    if magic != MAGIC or version != VERSION or len(raw) != HEADER.size + n * QUEUE.size + CRC.size:
        return None
    queues = {q: (a, b, c) for q, a, b, c in QUEUE.iter_unpack(raw[HEADER.size : -4])}
    return Checkpoint(position, records, first_ts, written, queues)


def write(root: Path, cp: Checkpoint) -> None:
    path = files.checkpoint_path(root)
    tmp = files.with_suffix(path, files.TMP_SUFFIX)
    fd = files.create_file(tmp, os.O_WRONLY)
    try:
        os.write(fd, encode(cp))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    files.fsync_dir(root)


def read(root: Path) -> Checkpoint | None:
    try:
        return decode(files.checkpoint_path(root).read_bytes())
    except FileNotFoundError:
        return None
