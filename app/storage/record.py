"""Record codec: the unit of the message log (format version 1).

A record on disk, all integers little-endian::

    offset  size  field
    0       4     payload_len  (u32, > 0)
    4       4     crc32        (u32, zlib CRC-32 of the payload bytes only)
    8       P     payload
    8+P     4     payload_len  (u32, repeated so the log can be validated and read backwards)

Payload::

    0   8   timestamp     u64  UTC epoch milliseconds (assigned by the store)
    8   2   flags         u16  bits 0-7: caller's; bit 15: END_OF_BATCH (last record of one append)
    10  2   n_placements  u16
    12  2   idem_len      u16
    14  2   tag_len       u16
    16  4   data_len      u32
    20  12n placements    n x (queue id u32, queue offset u64)
    ..      idempotency key, tag, data (raw bytes, in this order)

A record is valid when payload_len > 0, the record fits the chunk's data region, the suffix equals
the prefix, the CRC matches and the field lengths add up to payload_len. A zero length prefix marks
the end of the data. Records never span chunks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster on 100-byte records (same values)

from .errors import MessageTooLarge
from .model import AppendedBatch, NewMessage, Record

PREFIX = struct.Struct("<II")
SUFFIX = struct.Struct("<I")
HEADER = struct.Struct("<QHHHHI")
HEADER_ONE = struct.Struct("<QHHHHIIQ")  # header + one placement: the common case in one call
PLACEMENT = struct.Struct("<IQ")
FRAME = PREFIX.size + SUFFIX.size  # 12 bytes of framing around the payload
HEADER_SIZE = HEADER.size  # 20
END_OF_BATCH = 0x8000
CALLER_FLAGS = 0x00FF
MAX_U16 = 0xFFFF

_pack_joint = struct.Struct("<III").pack  # previous suffix + prefix
_pack_suffix = SUFFIX.pack
_pack_one = HEADER_ONE.pack
_pack_header = HEADER.pack
_pack_placement = PLACEMENT.pack


def _check_message(m: NewMessage, max_message_bytes: int) -> None:
    if len(m.data) > max_message_bytes:
        raise MessageTooLarge(f"message data of {len(m.data)} bytes exceeds the limit of {max_message_bytes}")
    if len(m.tag) > MAX_U16 or len(m.idempotency_key) > MAX_U16 or len(m.queues) > MAX_U16:
        raise MessageTooLarge("tag, idempotency key and placements are limited to 65535 each")
    if not 0 <= m.flags <= CALLER_FLAGS:
        raise ValueError(f"flags must be within 0..255, got {m.flags}")


def encode_batch(
    batch: Sequence[NewMessage],
    timestamp: int,
    position: int,
    next_offsets: dict[int, int],
    max_message_bytes: int,
    tag_hash_of: dict[bytes, int],
) -> tuple[bytes, AppendedBatch, dict[int, list[int]]]:
    """Encode a batch into one buffer starting at global ``position``.

    ``next_offsets`` (queue id -> next offset) is advanced in place for every placement; the caller
    passes a copy and keeps it only if the write succeeds. Returns the buffer, the positions and
    placements column by column, and per queue a flat list ``[pos+1, length | tag_hash << 32, ...]``
    of new index entries. This is the hottest loop of a publish: one pack, one CRC and a few list
    appends per record, and no object per record beyond its placements tuple.
    """
    parts: list[bytes] = []
    add = parts.append
    positions: list[int] = []
    add_position = positions.append
    placements: list[tuple[tuple[int, int], ...]] = []
    add_placements = placements.append
    entries: dict[int, list[int]] = {}
    last = batch[-1]
    prev = 0  # the previous record's length suffix travels in the next record's prefix pack
    for m in batch:
        data = m.data
        queues = m.queues
        flags = m.flags
        tag = m.tag
        idem = m.idempotency_key
        dl, tl, il = len(data), len(tag), len(idem)
        if dl > max_message_bytes or flags & ~CALLER_FLAGS or tl > MAX_U16 or il > MAX_U16:
            _check_message(m, max_message_bytes)
        if m is last:
            flags |= END_OF_BATCH
        single = len(queues) == 1
        if single:
            q = queues[0]
            o = next_offsets[q]
            next_offsets[q] = o + 1
            placed: tuple[tuple[int, int], ...] = ((q, o),)
            head = _pack_one(timestamp, flags, 1, il, tl, dl, q, o)
        else:
            if len(queues) > MAX_U16:
                _check_message(m, max_message_bytes)
            offsets: list[tuple[int, int]] = []
            for q in queues:
                o = next_offsets[q]
                next_offsets[q] = o + 1
                offsets.append((q, o))
            placed = tuple(offsets)
            head = _pack_header(timestamp, flags, len(queues), il, tl, dl) + b"".join(
                [_pack_placement(q, o) for q, o in placed]
            )
        if tl:
            th = tag_hash_of.get(tag)
            if th is None:
                th = crc32(tag) or 1
                if len(tag_hash_of) < 10_000:
                    tag_hash_of[tag] = th
            payload = head + idem + tag + data
        else:
            th = 0
            payload = head + idem + data if il else head + data
        plen = len(payload)
        add(_pack_joint(prev, plen, crc32(payload)))
        add(payload)
        prev = plen
        length = plen + 12
        if th:
            length |= th << 32  # the index entry's second u64: see queue_index.py
        if single:  # the common case without a loop (q is still the only queue id)
            e = entries.get(q)
            if e is None:
                entries[q] = [position + 1, length]
            else:
                e += (position + 1, length)
        else:
            for q, _ in placed:
                e = entries.get(q)
                if e is None:
                    entries[q] = [position + 1, length]
                else:
                    e += (position + 1, length)
        add_position(position)
        add_placements(placed)
        position += plen + 12
    add(_pack_suffix(prev))
    parts[0] = parts[0][4:]  # drop the suffix slot in front of the first record
    return b"".join(parts), AppendedBatch(timestamp, positions, placements), entries


def record_length(buf: bytes | memoryview, off: int, limit: int) -> int:
    """Length of the valid record at ``buf[off:]`` (framing included), or 0 if it is not valid.

    ``limit`` is the end of the readable region (the record must end at or before it).
    """
    if off + FRAME + HEADER_SIZE > limit:
        return 0
    plen, crc = PREFIX.unpack_from(buf, off)
    end = off + 8 + plen
    if plen < HEADER_SIZE or end + 4 > limit or SUFFIX.unpack_from(buf, end)[0] != plen:
        return 0
    _, _, n, il, tl, dl = HEADER.unpack_from(buf, off + 8)
    if HEADER_SIZE + 12 * n + il + tl + dl != plen:
        return 0
    if crc32(memoryview(buf)[off + 8 : end]) != crc:
        return 0
    return plen + FRAME


def is_end_of_batch(buf: bytes | memoryview, off: int) -> bool:
    return bool(HEADER.unpack_from(buf, off + 8)[1] & END_OF_BATCH)


def timestamp_at(buf: bytes | memoryview, off: int) -> int:
    return HEADER.unpack_from(buf, off + 8)[0]


def decode(buf: bytes | memoryview, off: int, position: int) -> Record:
    """Decode the (already validated) record at ``buf[off:]``."""
    ts, flags, n, il, tl, dl = HEADER.unpack_from(buf, off + 8)
    p = off + 8 + HEADER_SIZE
    placements = [(q, o) for q, o in PLACEMENT.iter_unpack(buf[p : p + 12 * n])] if n else []
    p += 12 * n
    idem = bytes(buf[p : p + il])
    p += il
    tag = bytes(buf[p : p + tl])
    p += tl
    return Record(position, ts, flags & CALLER_FLAGS, placements, idem, tag, bytes(buf[p : p + dl]))
