"""Record codec: the unit of the message log, and the only owner of its layout (format version 2).

A chunk's header names the record format of its records (chunk.py): new chunks are written in
format 2; chunks of version 1 (record_v1.py) stay readable, and every reader here takes the chunk's
``version``. A format-2 record on disk, integers little-endian::

    size   field
    1 | 5  prefix     payload length L: one byte 1..254, or 0xFF then L as u32 (L >= 255)
    4      crc32      u32, zlib CRC-32 of the payload bytes only
    -- payload (L bytes) --
    6      timestamp  u48  UTC epoch milliseconds (assigned by the store)
    1      flags      u8   the caller's bits 0-7
    1      layout     u8   bit 7 END_OF_BATCH (last record of one append); bit 6 a tag, bit 5 an
                           idempotency key, bit 4 not exactly one placement; bits 2-3 the width of the
                           queue offset (codes 0-3: 2, 3, 4, 8 bytes), bits 0-1 the width of the
                           queue id (codes 0-2: 1, 2, 4 bytes)
    2      tag_len    u16, with bit 6 only
    2      idem_len   u16, with bit 5 only
    ..     placements one (queue id, queue offset) in the widths of bits 0-3; with bit 4: a u16
                      count n, then n x (queue id u32, queue offset u64)
    ..     tag, idempotency key, data (raw bytes, in this order; data is the rest of the payload)
    -- end of payload --
    1 | 5  suffix     L again, mirrored so the log can be read backwards: one byte 1..254, or L as
                      u32 then 0xFF

So a 100-byte record with one placement in a queue of id < 256 at an offset < 65536 takes 6 + 8 + 3
+ 100 = 117 bytes (format 1: 144): ``record_size`` gives the bound publish limits are checked with,
and each index entry holds a record's exact length, which is what a queue's byte count adds.

A record is valid when its prefix is canonical and not zero, the record fits the readable region,
the suffix equals the prefix, the CRC matches and the fields fit the payload. A zero prefix byte marks
the end of the data. Records never span chunks, and one's last byte is never zero (the suffix), so a
live chunk's data ends before its trailing zeros.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster on 100-byte records (same values)

from . import record_v1
from .errors import MessageTooLarge
from .model import AppendedBatch, NewMessage, Record

VERSION = 2
LONG = 0xFF  # a prefix byte saying the length follows as u32 (and a suffix's last byte, mirrored)
SHORT_MAX = 0xFE
CRC_SIZE = 4
FRAME = 1 + CRC_SIZE + 1  # prefix, CRC and suffix around a payload of at most 254 bytes
LONG_FRAME = 5 + CRC_SIZE + 5
HEADER_SIZE = 8  # timestamp, flags, layout: the payload's fixed part
HEAD = struct.Struct("<BIIHBB")  # short prefix, crc, timestamp (low u32, high u16), flags, layout
PAYLOAD = 1 + CRC_SIZE  # where a short record's payload starts
FIELDS_AT = HEAD.size  # where a short record's variable fields start (13)
U32 = struct.Struct("<I")
U16 = struct.Struct("<H")
MULTI = struct.Struct("<IQ")  # one placement of a record with bit 4

END_OF_BATCH = 0x8000  # in the flags iter_records yields (bit 7 of the layout byte on disk)
CALLER_FLAGS = 0x00FF
MAX_U16 = 0xFFFF
L_END = 0x80
L_TAG = 0x40
L_IDEM = 0x20
L_MULTI = 0x10
L_WIDTHS = 0x0F
_QUEUE_CODES, _OFFSET_CODES = "BHIQ", "HIIQ"  # a 3-byte offset is packed as u32 without its top byte
_QUEUE_WIDTH, _OFFSET_WIDTH = (1, 2, 4, 8), (2, 3, 4, 8)
WIDTH = [_QUEUE_WIDTH[c & 3] + _OFFSET_WIDTH[c >> 2] for c in range(16)]  # bytes of one placement per code
THREE = 0x04  # the layout code of a 3-byte offset
_PLACEMENT = [struct.Struct("<" + _QUEUE_CODES[c & 3] + ("HB" if c >> 2 == 1 else _OFFSET_CODES[c >> 2]))
              for c in range(16)]
# timestamp, flags, layout and one placement: the common record's whole header in one pack
_HEAD_ONE = [struct.Struct("<IHBB" + _QUEUE_CODES[c & 3] + _OFFSET_CODES[c >> 2]).pack for c in range(16)]
_FIXED = struct.Struct("<IHBB")  # timestamp (low u32, high u16), flags, layout
_CRC_FIXED = struct.Struct("<IIHBB")  # a short record's CRC and fixed header
_pack_short = struct.Struct("<BBI").pack  # the previous record's short suffix, a short prefix, crc


def _queue_code(q: int) -> int:
    return 0 if q < 0x100 else 1 if q < 0x10000 else 2


def _offset_code(o: int) -> int:
    return 0 if o < 0x10000 else 4 if o < 0x1000000 else 8 if o < 0x100000000 else 12


def record_size(data_len: int, placements: int = 1, idem_len: int = 0, tag_len: int = 0,
                queue_id: int = 0xFFFFFFFF, offset: int = 1 << 63) -> int:
    """The bytes a record with these field lengths takes on disk, framing included: exact when its one
    placement is (``queue_id``, ``offset``), and a bound when they are bounds (the defaults: the widest
    placement). What publish limits are checked with; the index entry holds the exact size."""
    width = WIDTH[_queue_code(queue_id) | _offset_code(offset)] if placements == 1 else 2 + 12 * placements
    payload = HEADER_SIZE + width + data_len + (2 + tag_len if tag_len else 0) + (2 + idem_len if idem_len else 0)
    return payload + (FRAME if payload <= SHORT_MAX else LONG_FRAME)


def _check_message(m: NewMessage, max_message_bytes: int) -> None:
    if len(m.data) > max_message_bytes:
        raise MessageTooLarge(f"message data of {len(m.data)} bytes exceeds the limit of {max_message_bytes}")
    if len(m.tag) > MAX_U16 or len(m.idempotency_key) > MAX_U16 or len(m.queues) > MAX_U16:
        raise MessageTooLarge("tag, idempotency key and placements are limited to 65535 each")
    if not 0 <= m.flags <= CALLER_FLAGS:
        raise ValueError(f"flags must be within 0..255, got {m.flags}")


def _frame(prev: int, plen: int, crc: int) -> bytes:
    """The previous record's suffix, this record's prefix and CRC (any lengths)."""
    suffix = bytes((prev,)) if prev <= SHORT_MAX else U32.pack(prev) + b"\xff"
    prefix = bytes((plen,)) if plen <= SHORT_MAX else b"\xff" + U32.pack(plen)
    return suffix + prefix + U32.pack(crc)


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
    ts_lo, ts_hi = timestamp & 0xFFFFFFFF, timestamp >> 32
    head_one, short_max, pack_short = _HEAD_ONE, SHORT_MAX, _pack_short
    short_data = min(SHORT_MAX - HEADER_SIZE - 12, max_message_bytes)  # data that always takes a short frame
    for m in batch:
        data = m.data
        queues = m.queues
        flags = m.flags
        tag = m.tag
        idem = m.idempotency_key
        if not tag and not idem and len(queues) == 1 and len(data) <= short_data and not flags & ~CALLER_FLAGS \
                and m is not last:
            # The common record, inline: one placement, no tag or key, a short frame.
            q = queues[0]
            o = next_offsets[q]
            next_offsets[q] = o + 1
            if q < 0x100 and o < 0x10000:
                payload = head_one[0](ts_lo, ts_hi, flags, 0, q, o) + data
            else:
                code = (0 if q < 0x100 else 1 if q < 0x10000 else 2) | (
                    0 if o < 0x10000 else 4 if o < 0x1000000 else 8 if o < 0x100000000 else 12)
                head = head_one[code](ts_lo, ts_hi, flags, code, q, o)
                payload = (head[:-1] if code & 12 == THREE else head) + data
            plen = len(payload)
            if prev <= short_max:
                add(pack_short(prev, plen, crc32(payload)))
            else:
                add(_frame(prev, plen, crc32(payload)))
            add(payload)
            prev = plen
            e = entries.get(q)
            if e is None:
                entries[q] = [position + 1, plen + 6]
            else:
                e += (position + 1, plen + 6)
            add_position(position)
            add_placements(((q, o),))
            position += plen + 6
            continue
        dl, tl, il = len(data), len(tag), len(idem)
        if dl > max_message_bytes or flags & ~CALLER_FLAGS or tl > MAX_U16 or il > MAX_U16:
            _check_message(m, max_message_bytes)
        layout = L_END if m is last else 0
        if tl:
            layout |= L_TAG
        if il:
            layout |= L_IDEM
        single = len(queues) == 1
        if single:
            q = queues[0]
            o = next_offsets[q]
            next_offsets[q] = o + 1
            placed: tuple[tuple[int, int], ...] = ((q, o),)
            code = (0 if q < 0x100 else 1 if q < 0x10000 else 2) | (
                0 if o < 0x10000 else 4 if o < 0x1000000 else 8 if o < 0x100000000 else 12)
            layout |= code
            if not layout & (L_TAG | L_IDEM):
                head = head_one[code](ts_lo, ts_hi, flags, layout, q, o)
                payload = (head[:-1] if code & 12 == THREE else head) + data
            else:
                placement = _HEAD_ONE[code](0, 0, 0, 0, q, o)[HEADER_SIZE:]
                payload = (_FIXED.pack(ts_lo, ts_hi, flags, layout) + (U16.pack(tl) if tl else b"")
                           + (U16.pack(il) if il else b"") + (placement[:-1] if code & 12 == THREE else placement)
                           + tag + idem + data)
        else:
            if len(queues) > MAX_U16:
                _check_message(m, max_message_bytes)
            offsets: list[tuple[int, int]] = []
            for q in queues:
                o = next_offsets[q]
                next_offsets[q] = o + 1
                offsets.append((q, o))
            placed = tuple(offsets)
            layout |= L_MULTI
            payload = (_FIXED.pack(ts_lo, ts_hi, flags, layout) + (U16.pack(tl) if tl else b"")
                       + (U16.pack(il) if il else b"") + U16.pack(len(placed))
                       + b"".join([MULTI.pack(q, o) for q, o in placed]) + tag + idem + data)
        plen = len(payload)
        crc = crc32(payload)
        if plen <= short_max and prev <= short_max:
            add(pack_short(prev, plen, crc))
        else:
            add(_frame(prev, plen, crc))
        add(payload)
        prev = plen
        size = plen + (FRAME if plen <= short_max else LONG_FRAME)
        length = size
        if tl:
            th = tag_hash_of.get(tag)
            if th is None:
                th = crc32(tag) or 1
                if len(tag_hash_of) < 10_000:
                    tag_hash_of[tag] = th
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
        position += size
    add(bytes((prev,)) if prev <= SHORT_MAX else U32.pack(prev) + b"\xff")
    parts[0] = parts[0][1:]  # drop the suffix slot in front of the first record (a short zero)
    return b"".join(parts), AppendedBatch(timestamp, positions, placements), entries


# One record's fields as iter_records yields them: (offset, length, timestamp, flags, n_placements,
# idem_len, tag_len, data_len); offset and length cover the whole record, framing included, and flags
# holds the caller's bits plus END_OF_BATCH.
RecordHead = tuple[int, int, int, int, int, int, int, int]


def _layout(buf: bytes | memoryview, p: int, end: int, layout: int) -> tuple[int, int, int, int, int] | None:
    """(tag_len, idem_len, n_placements, tag start, data end) of a payload whose fixed header ends at
    ``p`` and which ends at ``end``; None if the fields do not fit (an invalid record)."""
    tl = il = 0
    if layout & L_TAG:
        if p + 2 > end:
            return None
        tl = U16.unpack_from(buf, p)[0]
        p += 2
    if layout & L_IDEM:
        if p + 2 > end:
            return None
        il = U16.unpack_from(buf, p)[0]
        p += 2
    if layout & L_MULTI:
        if layout & L_WIDTHS or p + 2 > end:
            return None
        n = U16.unpack_from(buf, p)[0]
        p += 2 + 12 * n
    else:
        if layout & 3 == 3:
            return None
        n = 1
        p += WIDTH[layout & L_WIDTHS]
    if p + tl + il > end:
        return None
    return tl, il, n, p, end


def _frame_at(buf: bytes | memoryview, off: int, limit: int) -> tuple[int, int] | None:
    """(payload start, payload length) of the record at ``off`` per its prefix and suffix; None if
    the prefix is zero or not canonical, or the record does not fit before ``limit``."""
    if off + FRAME > limit:
        return None
    b = buf[off]
    if b != LONG:
        if not b or off + FRAME + b > limit or buf[off + PAYLOAD + b] != b:
            return None
        return off + PAYLOAD, b
    if off + LONG_FRAME > limit:
        return None
    plen = U32.unpack_from(buf, off + 1)[0]
    end = off + 9 + plen
    if plen <= SHORT_MAX or end + 5 > limit or buf[end + 4] != LONG or U32.unpack_from(buf, end)[0] != plen:
        return None
    return off + 9, plen


def iter_records(buf: bytes | memoryview, off: int, limit: int, version: int = VERSION) -> Iterator[RecordHead]:
    """The valid records of ``buf[off:limit]``, in order, up to the first invalid or zero one
    (``version``: the chunk's record format).

    The one validating loop of the log: recovery, chunk scans, Store.scan and reader.py iterate with it; the
    indexed read paths (one record per index entry) check length and CRC inline instead.
    """
    if version == 1:
        yield from record_v1.iter_records(buf, off, limit)
        return
    head, width, crc_fixed, short_frame = HEADER_SIZE, WIDTH, _CRC_FIXED.unpack_from, FRAME
    while True:
        b = buf[off] if off < limit else 0
        if b and b != LONG:  # the common record, inline: a short frame, one placement, no tag or key
            end = off + PAYLOAD + b
            if b < head or end >= limit or buf[end] != b:
                return
            crc, ts_lo, ts_hi, flags, layout = crc_fixed(buf, off + 1)
            if not layout & (L_TAG | L_IDEM | L_MULTI):
                dl = b - head - width[layout & L_WIDTHS]
                if dl < 0 or layout & 3 == 3 or crc32(buf[off + PAYLOAD : end]) != crc:
                    return
                yield off, b + short_frame, ts_lo | ts_hi << 32, flags | (END_OF_BATCH if layout & L_END else 0), 1, 0, 0, dl
                off = end + 1
                continue
        f = _frame_at(buf, off, limit)
        if f is None:
            return
        p, plen = f
        if plen < head or crc32(buf[p : p + plen]) != U32.unpack_from(buf, p - CRC_SIZE)[0]:
            return
        ts_lo, ts_hi, flags, layout = _FIXED.unpack_from(buf, p)
        fields = _layout(buf, p + head, p + plen, layout)
        if fields is None:
            return
        tl, il, n, start, end = fields
        length = plen + (FRAME if plen <= SHORT_MAX else LONG_FRAME)
        yield (off, length, ts_lo | ts_hi << 32, flags | (END_OF_BATCH if layout & L_END else 0), n, il, tl,
               end - start - tl - il)
        off += length


def record_length(buf: bytes | memoryview, off: int, limit: int, version: int = VERSION) -> int:
    """Length of the valid record at ``buf[off:]`` (framing included), or 0 if it is not valid.

    ``limit`` is the end of the readable region (the record must end at or before it).
    """
    for r in iter_records(buf, off, limit, version):
        return r[1]
    return 0


def declared_length(buf: bytes | memoryview, off: int, limit: int, version: int = VERSION) -> int:
    """The length (framing included) the prefix at ``off`` claims, valid or not; 0 if none."""
    if version == 1:
        if off + record_v1.PREFIX.size > limit:
            return 0
        plen = record_v1.PREFIX.unpack_from(buf, off)[0]
        return plen + record_v1.FRAME if plen else 0
    if off + FRAME > limit or not buf[off]:
        return 0
    if buf[off] != LONG:
        return buf[off] + FRAME
    return U32.unpack_from(buf, off + 1)[0] + LONG_FRAME if off + 5 <= limit else 0


def length_before(buf: bytes | memoryview, start: int, end: int, version: int = VERSION) -> int:
    """Length of the valid record that ends exactly at ``end`` (read backwards from its suffix, not
    before ``start``), or 0 if none does."""
    if version == 1:
        if end - start < record_v1.FRAME + record_v1.HEADER_SIZE:
            return 0
        n = record_v1.SUFFIX.unpack_from(buf, end - record_v1.SUFFIX.size)[0] + record_v1.FRAME
    else:
        if end - start < FRAME + HEADER_SIZE:
            return 0
        b = buf[end - 1]
        n = b + FRAME if b != LONG else U32.unpack_from(buf, end - 5)[0] + LONG_FRAME
    if end - n < start:
        return 0
    return n if record_length(buf, end - n, end, version) == n else 0


def timestamp_at(buf: bytes | memoryview, off: int, version: int = VERSION) -> int:
    if version == 1:
        return record_v1.timestamp_at(buf, off)
    p = off + (PAYLOAD if buf[off] != LONG else 9)
    lo, hi = struct.unpack_from("<IH", buf, p)
    return lo | hi << 32


def placements_at(buf: bytes | memoryview, off: int, version: int = VERSION) -> list[tuple[int, int]]:
    """The (queue id, queue offset) placements of the (already validated) record at ``off``."""
    if version == 1:
        n = record_v1.HEADER.unpack_from(buf, off + record_v1.PAYLOAD_OFFSET)[2]
        p = off + record_v1.PLACEMENTS_OFFSET
        return list(record_v1.PLACEMENT.iter_unpack(buf[p : p + record_v1.PLACEMENT_SIZE * n])) if n else []
    p = off + (PAYLOAD if buf[off] != LONG else 9)
    layout = buf[p + 7]
    p += HEADER_SIZE + (2 if layout & L_TAG else 0) + (2 if layout & L_IDEM else 0)
    if not layout & L_MULTI:
        if layout & 12 == THREE:
            q, lo, hi = _PLACEMENT[layout & L_WIDTHS].unpack_from(buf, p)
            return [(q, lo | hi << 16)]
        return [_PLACEMENT[layout & L_WIDTHS].unpack_from(buf, p)]
    n = U16.unpack_from(buf, p)[0]
    return list(MULTI.iter_unpack(buf[p + 2 : p + 2 + 12 * n])) if n else []


def tag_at(buf: bytes | memoryview, off: int, version: int = VERSION) -> bytes:
    """The tag of the (already validated) record at ``off`` (b"" for none)."""
    if version == 1:
        _, _, n, il, tl, _ = record_v1.HEADER.unpack_from(buf, off + record_v1.PAYLOAD_OFFSET)
        t = off + record_v1.PLACEMENTS_OFFSET + record_v1.PLACEMENT_SIZE * n + il
        return bytes(buf[t : t + tl])
    b = buf[off]
    p, plen = (off + PAYLOAD, b) if b != LONG else (off + 9, U32.unpack_from(buf, off + 1)[0])
    layout = buf[p + 7]
    if not layout & L_TAG:
        return b""
    fields = _layout(buf, p + HEADER_SIZE, p + plen, layout)
    assert fields is not None
    return bytes(buf[fields[3] : fields[3] + fields[0]])


def fields_at(buf: bytes | memoryview, off: int, length: int, verify: bool,
              version: int = VERSION) -> tuple[int, int, bytes, bytes] | None:
    """(timestamp, caller flags, tag, data) of the record at ``off`` whose index entry says
    ``length``; None if the record there does not have that length or fails its CRC (with ``verify``).
    The read paths inline the common layout of format 2 and call this for the others."""
    if version == 1:
        v1 = record_v1
        plen, crc, ts, flags, n, il, tl, dl = v1.HEAD.unpack_from(buf, off)
        p = off + v1.PAYLOAD_OFFSET
        if plen + v1.FRAME != length or (verify and crc32(buf[p : p + plen]) != crc):
            return None
        d = off + v1.PLACEMENTS_OFFSET + v1.PLACEMENT_SIZE * n + il
        return ts, flags & CALLER_FLAGS, bytes(buf[d : d + tl]), bytes(buf[d + tl : d + tl + dl])
    b = buf[off]
    if b != LONG:
        p, plen = off + PAYLOAD, b
        if plen + FRAME != length:
            return None
    else:
        p, plen = off + 9, U32.unpack_from(buf, off + 1)[0]
        if plen + LONG_FRAME != length:
            return None
    if verify and crc32(buf[p : p + plen]) != U32.unpack_from(buf, p - CRC_SIZE)[0]:
        return None
    ts_lo, ts_hi, flags, layout = _FIXED.unpack_from(buf, p)
    fields = _layout(buf, p + HEADER_SIZE, p + plen, layout)
    if fields is None:
        return None
    tl, il, _, start, end = fields
    return ts_lo | ts_hi << 32, flags, bytes(buf[start : start + tl]), bytes(buf[start + tl + il : end])


def decode(buf: bytes | memoryview, off: int, position: int, version: int = VERSION) -> Record:
    """Decode the (already validated) record at ``buf[off:]``."""
    if version == 1:
        return record_v1.decode(buf, off, position)
    b = buf[off]
    p, plen = (off + PAYLOAD, b) if b != LONG else (off + 9, U32.unpack_from(buf, off + 1)[0])
    ts_lo, ts_hi, flags, layout = _FIXED.unpack_from(buf, p)
    fields = _layout(buf, p + HEADER_SIZE, p + plen, layout)
    if fields is None:
        raise ValueError(f"record at {position} is not valid")
    tl, il, _, start, end = fields
    return Record(position, ts_lo | ts_hi << 32, flags, placements_at(buf, off), bytes(buf[start + tl : start + tl + il]),
                  bytes(buf[start : start + tl]), bytes(buf[start + tl + il : end]))


def columns(buf: bytes, starts: Any, lengths: Any, verify: Any) -> tuple[Any, ...]:
    """The fields of the format-2 records at ``starts`` of ``buf`` (whose index entries say
    ``lengths``), parsed with numpy for all rows at once: (timestamps, flags, tag_start, tag_len,
    data_start, data_len, valid). A row is valid when its prefix and suffix agree with its length,
    its fields fit and (where the bool array ``verify`` says so) its CRC matches; the CRCs are the one
    loop per row."""
    import numpy as np

    size = len(buf)
    b = np.frombuffer(buf + bytes(32), np.uint8)  # the padding keeps every probe of a bad record in range
    s = starts.astype(np.int64)
    n = lengths.astype(np.int64)
    ok = (s >= 0) & (n >= FRAME + HEADER_SIZE) & (s + n <= size)
    s = np.where(ok, s, 0)
    n = np.where(ok, n, FRAME + HEADER_SIZE)

    # unaligned views whose element i is the integer at byte i: one gather per field, not one per byte
    b16 = np.ndarray((size + 1,), "<u2", b, 0, (1,))
    b32 = np.ndarray((size + 1,), "<u4", b, 0, (1,))

    def at(i: Any) -> Any:
        return b[np.minimum(i, size)].astype(np.int64)

    def u16(i: Any) -> Any:
        return b16[np.minimum(i, size)].astype(np.int64)

    def u32(i: Any) -> Any:
        return b32[np.minimum(i, size)].astype(np.int64)

    def u16_where(has: Any, i: Any) -> Any:  # no gather when no row has the field (nearly always)
        return np.where(has, u16(i), 0) if has.any() else np.zeros(len(has), np.int64)

    first = at(s)
    long = first == LONG
    some_long = bool(long.any())  # records over 254 bytes; a page of small messages has none
    p = s + (np.where(long, 9, PAYLOAD) if some_long else PAYLOAD)  # payload start
    plen = np.where(long, u32(s + 1), first) if some_long else first
    end = s + n - (np.where(long, 5, 1) if some_long else 1)  # payload end
    ok &= (plen == end - p) & (plen >= HEADER_SIZE) & (np.where(long, plen > SHORT_MAX, plen > 0))
    ok &= np.where(long, at(end + 4) == LONG, at(end) == plen) if some_long else at(end) == plen
    ts = u32(p) | u16(p + 4) << 32
    flags = at(p + 6)
    layout = at(p + 7)
    q = p + HEADER_SIZE
    has_tag = (layout & L_TAG) != 0
    tl = u16_where(has_tag, q)
    q = q + has_tag * 2
    has_idem = (layout & L_IDEM) != 0
    il = u16_where(has_idem, q)
    q = q + has_idem * 2
    multi = (layout & L_MULTI) != 0
    width = np.asarray(WIDTH)[layout & L_WIDTHS]
    if multi.any():
        width = np.where(multi, 2 + 12 * u16(q), width)
    ok &= ~(multi & ((layout & L_WIDTHS) != 0)) & (multi | ((layout & 3) != 3))
    tag_start = q + width
    data_start = tag_start + tl + il
    ok &= data_start <= end
    rows = np.flatnonzero(verify & ok)
    rows = rows[~_runs_pass(b, s, n, plen, long, rows)]  # what is left is checked record by record
    if len(rows):
        crcs = np.fromiter(map(crc32, map(buf.__getitem__, map(slice, p[rows].tolist(), end[rows].tolist()))),
                           np.int64, len(rows))
        ok[rows] &= crcs == u32(p[rows] - CRC_SIZE)
    return ts, flags, tag_start, tl, data_start, end - data_start, ok


MIN_RUN = 32  # shorter runs are checked record by record


def _runs_pass(b: Any, s: Any, n: Any, plen: Any, long: Any, rows: Any) -> Any:
    """Which of ``rows`` (short records) pass their CRC check as part of a run: records of one payload
    length L lying back to back in ``b``. A run is checked with one CRC-32 call instead of one per
    record (the per-record calls are about a quarter of a page's CPU on the Arrow read path).

    Each record's payload is put before its own CRC (little-endian), and the run is read as one
    stream: a zlib CRC-32 over data followed by its CRC always ends on the same value (the CRC's
    residue), whatever the data, so over k valid records the stream's CRC depends on (L, k) only, and
    equals that of k records of zeros (_valid_run). A record whose CRC does not match changes the
    result whatever the others hold (CRC-32 is linear and its shift by the bytes that follow is
    invertible); several bad records cancel out with probability 2**-32, as within one CRC. A run
    that fails is checked record by record, which finds the bad ones."""
    import numpy as np

    passed = np.zeros(len(rows), bool)
    if len(rows) < MIN_RUN:
        return passed
    rs, rl = s[rows], plen[rows]
    # a run breaks where the next record does not start at this one's end, or has another length
    joined = (rs[1:] == rs[:-1] + n[rows[:-1]]) & (rl[1:] == rl[:-1]) & ~long[rows[1:]] & ~long[rows[:-1]]
    breaks = np.flatnonzero(~joined) + 1
    for first, stop in zip([0, *breaks.tolist()], [*breaks.tolist(), len(rows)], strict=True):
        k = stop - first
        if k < MIN_RUN or long[rows[first]]:
            continue
        size, length = int(n[rows[first]]), int(rl[first])
        records = np.lib.stride_tricks.as_strided(b[int(rs[first]):], shape=(k, size), strides=(size, 1))
        stream = np.empty((k, length + CRC_SIZE), np.uint8)
        stream[:, :length] = records[:, PAYLOAD : PAYLOAD + length]
        stream[:, length:] = records[:, 1:PAYLOAD]
        if crc32(stream) == _valid_run(length, k):
            passed[first:stop] = True
    return passed


@functools.lru_cache(maxsize=64)
def _valid_run(length: int, k: int) -> int:
    """The CRC-32 of k valid (payload, CRC) pairs of ``length`` bytes: that of k pairs of zeros."""
    zeros = bytes(length)
    return crc32((zeros + U32.pack(crc32(zeros))) * k)
