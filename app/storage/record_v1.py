"""Record format 1 (chunks of version 1), read only: stores written before format 2 stay readable.

record.py writes format 2 and dispatches reads of version-1 chunks here.

A record on disk, all integers little-endian (offsets from the record's start; each field's offset is
the previous field's offset plus its size, as the constants below are derived)::

    offset      size  field
    0           4     payload_len   u32, > 0: bytes from PAYLOAD_OFFSET up to the suffix
    4           4     crc32         u32, zlib CRC-32 of the payload bytes only
    8           8     timestamp     u64  UTC epoch milliseconds (assigned by the store)  -- payload starts
    16          2     flags         u16  bits 0-7: caller's; bit 15: END_OF_BATCH (last record of one append)
    18          2     n_placements  u16
    20          2     idem_len      u16
    22          2     tag_len       u16
    24          4     data_len      u32
    28          12n   placements    n x (queue id u32, queue offset u64)
    28+12n      ..    idempotency key, tag, data (raw bytes, in this order)
    8+P         4     payload_len   u32, repeated so the log can be validated and read backwards

So a record takes 32 + 12n + idem_len + tag_len + data_len bytes on disk.

A record is valid when payload_len > 0, the record fits the chunk's data region, the suffix equals
the prefix, the CRC matches and the field lengths add up to payload_len. A zero length prefix marks
the end of the data. Records never span chunks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster on 100-byte records (same values)

from .model import ReadBuffer, Record

# Field offsets (from the record's start) and sizes, each offset derived from the one before it.
PAYLOAD_LEN_OFFSET = 0
PAYLOAD_LEN_SIZE = 4
CRC_OFFSET = PAYLOAD_LEN_OFFSET + PAYLOAD_LEN_SIZE
CRC_SIZE = 4
PAYLOAD_OFFSET = CRC_OFFSET + CRC_SIZE  # the CRC covers the payload, from here up to the suffix
TIMESTAMP_OFFSET = PAYLOAD_OFFSET
TIMESTAMP_SIZE = 8
FLAGS_OFFSET = TIMESTAMP_OFFSET + TIMESTAMP_SIZE
FLAGS_SIZE = 2
PLACEMENT_COUNT_OFFSET = FLAGS_OFFSET + FLAGS_SIZE
PLACEMENT_COUNT_SIZE = 2
IDEM_LEN_OFFSET = PLACEMENT_COUNT_OFFSET + PLACEMENT_COUNT_SIZE
IDEM_LEN_SIZE = 2
TAG_LEN_OFFSET = IDEM_LEN_OFFSET + IDEM_LEN_SIZE
TAG_LEN_SIZE = 2
DATA_LEN_OFFSET = TAG_LEN_OFFSET + TAG_LEN_SIZE
DATA_LEN_SIZE = 4
PLACEMENTS_OFFSET = DATA_LEN_OFFSET + DATA_LEN_SIZE  # n placements, then key, tag and data
PLACEMENT_SIZE = 4 + 8  # queue id u32, queue offset u64
SUFFIX_SIZE = PAYLOAD_LEN_SIZE  # payload_len again, after the payload

HEADER_SIZE = PLACEMENTS_OFFSET - PAYLOAD_OFFSET  # the payload's fixed part (20)
FRAME = PAYLOAD_OFFSET + SUFFIX_SIZE  # framing around the payload (12)
RECORD_OVERHEAD = PLACEMENTS_OFFSET + SUFFIX_SIZE  # a record without placements and empty fields (32)

PREFIX = struct.Struct("<II")  # payload_len, crc32
SUFFIX = struct.Struct("<I")
HEADER = struct.Struct("<QHHHHI")  # timestamp .. data_len
HEAD = struct.Struct("<IIQHHHHI")  # prefix + header: one call per record on the read paths
HEADER_ONE = struct.Struct("<QHHHHIIQ")  # header + one placement: the common case in one call
PLACEMENT = struct.Struct("<IQ")
assert PREFIX.size == PAYLOAD_OFFSET and SUFFIX.size == SUFFIX_SIZE and HEADER.size == HEADER_SIZE
assert HEAD.size == PLACEMENTS_OFFSET and PLACEMENT.size == PLACEMENT_SIZE
assert HEADER_ONE.size == HEADER_SIZE + PLACEMENT_SIZE

END_OF_BATCH = 0x8000
CALLER_FLAGS = 0x00FF

# One record's fields as iter_records yields them: (offset, length, timestamp, flags, n_placements,
# idem_len, tag_len, data_len); offset and length cover the whole record, framing included.
RecordHead = tuple[int, int, int, int, int, int, int, int]


def iter_records(buf: ReadBuffer, off: int, limit: int) -> Iterator[RecordHead]:
    """The valid records of ``buf[off:limit]``, in order, up to the first invalid or zero one.

    The one validating loop of the log: recovery, chunk scans, Store.scan and reader.py iterate with it; the
    indexed read paths (one record per index entry) check length and CRC inline instead.
    """
    unpack_head, unpack_suffix = HEAD.unpack_from, SUFFIX.unpack_from
    head, frame, payload, per_placement = HEADER_SIZE, FRAME, PAYLOAD_OFFSET, PLACEMENT_SIZE
    while off + frame + head <= limit:
        plen, crc, ts, flags, n, il, tl, dl = unpack_head(buf, off)
        end = off + payload + plen
        if plen < head or end + SUFFIX_SIZE > limit or unpack_suffix(buf, end)[0] != plen:
            return
        if head + per_placement * n + il + tl + dl != plen or crc32(buf[off + payload : end]) != crc:
            return
        yield off, plen + frame, ts, flags, n, il, tl, dl
        off += plen + frame


def record_length(buf: ReadBuffer, off: int, limit: int) -> int:
    """Length of the valid record at ``buf[off:]`` (framing included), or 0 if it is not valid.

    ``limit`` is the end of the readable region (the record must end at or before it).
    """
    for r in iter_records(buf, off, limit):
        return r[1]
    return 0


def timestamp_at(buf: ReadBuffer, off: int) -> int:
    ts: int = HEADER.unpack_from(buf, off + TIMESTAMP_OFFSET)[0]
    return ts


def decode(buf: ReadBuffer, off: int, position: int) -> Record:
    """Decode the (already validated) record at ``buf[off:]``."""
    ts, flags, n, il, tl, dl = HEADER.unpack_from(buf, off + PAYLOAD_OFFSET)
    p = off + PLACEMENTS_OFFSET
    placements = [(q, o) for q, o in PLACEMENT.iter_unpack(buf[p : p + PLACEMENT_SIZE * n])] if n else []
    p += PLACEMENT_SIZE * n
    idem = bytes(buf[p : p + il])
    p += il
    tag = bytes(buf[p : p + tl])
    p += tl
    return Record(position, ts, flags & CALLER_FLAGS, placements, idem, tag, bytes(buf[p : p + dl]))
