"""Record format: the unit of the message log, and the only owner of its layout (format version 2),
with the readers of one record. Writing a batch is record_encode.py's; reading many records' fields
at once as columns is record_columns.py's; both take the layout from here.

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

import os
import struct
from collections.abc import Iterator
from typing import Any

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster on 100-byte records (same values)

from . import record_v1
from .errors import CorruptChunk
from .model import ReadBuffer, Record, StoredMessage


def _compiled() -> tuple[Any, str]:
    """The compiled twin of the codec's hot loops (_recordc.c: record_encode's encode_batch and
    encode_one, record_columns' columns), or None where it is not built or CHUNKMQ_PURE_PYTHON is
    set; and which codec runs, in words (`chunkmq serve` logs it). The Python functions stay the
    reference, and the fallback."""
    if os.environ.get("CHUNKMQ_PURE_PYTHON", "") not in ("", "0"):
        return None, "pure Python (CHUNKMQ_PURE_PYTHON is set)"
    try:
        from . import _recordc
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    return _recordc, "compiled"


_recordc, IMPLEMENTATION = _compiled()

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
_FIXED = struct.Struct("<IHBB")  # timestamp (low u32, high u16), flags, layout
_CRC_FIXED = struct.Struct("<IIHBB")  # a short record's CRC and fixed header


def _queue_code(q: int) -> int:
    return 0 if q < 0x100 else 1 if q < 0x10000 else 2


def _offset_code(o: int) -> int:
    return 0 if o < 0x10000 else 4 if o < 0x1000000 else 8 if o < 0x100000000 else 12


def _payload_size(data_len: int, placements: int, idem_len: int, tag_len: int, queue_id: int, offset: int) -> int:
    width = WIDTH[_queue_code(queue_id) | _offset_code(offset)] if placements == 1 else 2 + 12 * placements
    return HEADER_SIZE + width + data_len + (2 + tag_len if tag_len else 0) + (2 + idem_len if idem_len else 0)


def record_size(data_len: int, placements: int = 1, idem_len: int = 0, tag_len: int = 0,
                queue_id: int = 0xFFFFFFFF, offset: int = 1 << 63) -> int:
    """The bytes a record with these field lengths takes on disk, framing included: exact when its one
    placement is (``queue_id``, ``offset``), and a bound when they are bounds (the defaults: the widest
    placement). What publish limits are checked with; the index entry holds the exact size."""
    payload = _payload_size(data_len, placements, idem_len, tag_len, queue_id, offset)
    return payload + (FRAME if payload <= SHORT_MAX else LONG_FRAME)


# One record's fields as iter_records yields them: (offset, length, timestamp, flags, n_placements,
# idem_len, tag_len, data_len); offset and length cover the whole record, framing included, and flags
# holds the caller's bits plus END_OF_BATCH.
RecordHead = tuple[int, int, int, int, int, int, int, int]


def _layout(buf: ReadBuffer, p: int, end: int, layout: int) -> tuple[int, int, int, int, int] | None:
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


def _frame_at(buf: ReadBuffer, off: int, limit: int) -> tuple[int, int] | None:
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


def iter_records(buf: ReadBuffer, off: int, limit: int, version: int = VERSION) -> Iterator[RecordHead]:
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
                yield (off, b + short_frame, ts_lo | ts_hi << 32, flags | (END_OF_BATCH if layout & L_END else 0),
                       1, 0, 0, dl)
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


def record_length(buf: ReadBuffer, off: int, limit: int, version: int = VERSION) -> int:
    """Length of the valid record at ``buf[off:]`` (framing included), or 0 if it is not valid.

    ``limit`` is the end of the readable region (the record must end at or before it).
    """
    for r in iter_records(buf, off, limit, version):
        return r[1]
    return 0


def declared_length(buf: ReadBuffer, off: int, limit: int, version: int = VERSION) -> int:
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


def length_before(buf: ReadBuffer, start: int, end: int, version: int = VERSION) -> int:
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


def timestamp_at(buf: ReadBuffer, off: int, version: int = VERSION) -> int:
    if version == 1:
        return record_v1.timestamp_at(buf, off)
    p = off + (PAYLOAD if buf[off] != LONG else 9)
    lo, hi = struct.unpack_from("<IH", buf, p)
    ts: int = lo | hi << 32
    return ts


def placements_at(buf: ReadBuffer, off: int, version: int = VERSION) -> list[tuple[int, int]]:
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


def tag_at(buf: ReadBuffer, off: int, version: int = VERSION) -> bytes:
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


def fields_at(buf: ReadBuffer, off: int, length: int, verify: bool,
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


_head_from = HEAD.unpack_from  # a short record's prefix, CRC and fixed header: one call per record on read
Entries = Iterator[tuple[int, tuple[int, int, int]]]  # (queue offset, (position + 1, length, tag hash))


def read_run(src: Any, delta: int, lo: int, hi: int, entries: Entries, out: list[StoredMessage], check: bool,
             version: int, chunk_size: int) -> tuple[int, tuple[int, int, int]] | None:
    """The read path's loop: decode the records of index `entries` while their position + 1 is in
    (lo, hi], each at ``src[position + 1 + delta]``, appending (offset, position, timestamp, flags,
    tag, data) to `out`; returns the first entry past that range (None when there is none).

    Each record's length must be the entry's, and with `check` its CRC must match: CorruptChunk
    otherwise. The common record of format 2 (short, without tag, key or several placements) is read
    inline, one struct call and a slice; the others through fields_at."""
    add = out.append
    frame, payload, fields, width, rare = FRAME, PAYLOAD, FIELDS_AT, WIDTH, L_TAG | L_IDEM | L_MULTI
    head_from, current = _head_from, version == VERSION
    for item in entries:
        o, (p1, length, _th) = item
        if not lo < p1 <= hi:
            return item
        off = p1 + delta
        if current:
            b, crc, ts_lo, ts_hi, flags, layout = head_from(src, off)
            if b + frame == length and not layout & rare:
                e = off + payload + b
                if check and crc32(src[off + payload : e]) != crc:
                    raise CorruptChunk(f"record at {p1 - 1} fails validation", chunk=(p1 - 1) // chunk_size,
                                       position=p1 - 1)
                add((o, p1 - 1, ts_lo | ts_hi << 32, flags, b"", src[off + fields + width[layout & L_WIDTHS] : e]))
                continue
        got = fields_at(src, off, length, check, version)
        if got is None:
            raise CorruptChunk(f"record at {p1 - 1} fails validation", chunk=(p1 - 1) // chunk_size, position=p1 - 1)
        add((o, p1 - 1, *got))
    return None


def decode(buf: ReadBuffer, off: int, position: int, version: int = VERSION) -> Record:
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
    return Record(position, ts_lo | ts_hi << 32, flags, placements_at(buf, off),
                  bytes(buf[start + tl : start + tl + il]), bytes(buf[start : start + tl]),
                  bytes(buf[start + tl + il : end]))
