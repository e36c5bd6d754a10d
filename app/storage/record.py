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
import itertools
import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster on 100-byte records (same values)

from . import record_v1
from .errors import CorruptChunk, MessageTooLarge
from .model import AppendedBatch, MessageColumns, NewMessage, ReadBuffer, Record, StoredMessage
from .queue_index import ENTRY_SIZE, pack_entries


def _compiled() -> tuple[Any, str]:
    """The compiled twin of this module's hot loops (_recordc.c: encode_batch and columns), or None
    where it is not built or CHUNKMQ_PURE_PYTHON is set; and which codec runs, in words (`chunkmq
    serve` logs it). The Python functions below stay the reference, and the fallback."""
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
# timestamp, flags, layout and one placement: the common record's whole header in one pack
_HEAD_ONE = [struct.Struct("<IHBB" + _QUEUE_CODES[c & 3] + _OFFSET_CODES[c >> 2]).pack for c in range(16)]
_FIXED = struct.Struct("<IHBB")  # timestamp (low u32, high u16), flags, layout
_CRC_FIXED = struct.Struct("<IIHBB")  # a short record's CRC and fixed header
_pack_short = struct.Struct("<BBI").pack  # the previous record's short suffix, a short prefix, crc


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


def _check_message(data: bytes, queues: Sequence[int], tag: bytes, idem: bytes, flags: int,
                   max_message_bytes: int) -> None:
    if len(data) > max_message_bytes:
        raise MessageTooLarge(f"message data of {len(data)} bytes exceeds the limit of {max_message_bytes}")
    if len(tag) > MAX_U16 or len(idem) > MAX_U16 or len(queues) > MAX_U16:
        raise MessageTooLarge("tag, idempotency key and placements are limited to 65535 each")
    if not 0 <= flags <= CALLER_FLAGS:
        raise ValueError(f"flags must be within 0..255, got {flags}")


def _frame(prev: int, plen: int, crc: int) -> bytes:
    """The previous record's suffix, this record's prefix and CRC (any lengths)."""
    suffix = bytes((prev,)) if prev <= SHORT_MAX else U32.pack(prev) + b"\xff"
    prefix = bytes((plen,)) if plen <= SHORT_MAX else b"\xff" + U32.pack(plen)
    return suffix + prefix + U32.pack(crc)


def _suffix(plen: int) -> bytes:
    return bytes((plen,)) if plen <= SHORT_MAX else U32.pack(plen) + b"\xff"


def _tag_hash(tag: bytes, tag_hash_of: dict[bytes, int]) -> int:
    """The tag's hash in its index entries (queue_index.py), cached: tags repeat."""
    th = tag_hash_of.get(tag)
    if th is None:
        th = crc32(tag) or 1
        if len(tag_hash_of) < 10_000:
            tag_hash_of[tag] = th
    return th


# The buffer, what was stored, and per queue its new index entries packed (queue_index.py: position + 1,
# then the record's length with its tag's hash above bit 32) with the bytes of their records.
Encoded = tuple[bytes, AppendedBatch, dict[int, tuple[bytes, int]]]
COLUMNS_MIN = 256  # smaller batches go record by record: numpy's fixed cost (about 100 calls) outweighs the loop


def encode_batch(batch: MessageColumns | Sequence[NewMessage], timestamp: int, position: int,
                 next_offsets: dict[int, int], max_message_bytes: int, tag_hash_of: dict[bytes, int]) -> Encoded:
    """Encode a batch into one buffer starting at global ``position``.

    ``next_offsets`` (queue id -> next offset) is advanced in place for every placement; the caller
    passes a copy and keeps it only if the write succeeds. Returns the buffer, the positions and
    placements column by column, and per queue its new index entries (Encoded). Large batches are
    encoded column by column (encode_columns), small ones record by record (encode_records): both
    write the same bytes.
    """
    if not isinstance(batch, MessageColumns):
        batch = MessageColumns.of(batch)
    if _recordc is not None:
        encoded = encode_compiled(batch, timestamp, position, next_offsets, max_message_bytes)
        if encoded is not None:
            return encoded
    encode = encode_columns if len(batch.data) >= COLUMNS_MIN else encode_records
    return encode(batch, timestamp, position, next_offsets, max_message_bytes, tag_hash_of)


def encode_one(data: bytes, queue_id: int, timestamp: int, position: int, offset: int, max_message_bytes: int,
               tag_hash_of: dict[bytes, int], flags: int = 0) -> tuple[bytes, bytes, int]:
    """encode_batch of one record with no tag or key, placed at `offset` of one queue: its bytes, its
    packed index entry and the bytes it adds to the queue (the compiled twin's encode_one, which
    leaves what it does not handle to this)."""
    if _recordc is not None and (got := _recordc.encode_one(data, queue_id, timestamp, position, offset,
                                                            max_message_bytes, flags)) is not None:
        return got  # type: ignore[no-any-return]
    batch = MessageColumns([data], [(queue_id,)], flags=[flags] if flags else None)
    buf, _, entries = encode_batch(batch, timestamp, position, {queue_id: offset},
                                   max_message_bytes, tag_hash_of)  # raises what the record breaks
    return buf, *entries[queue_id]


def encode_compiled(batch: MessageColumns, timestamp: int, position: int, next_offsets: dict[int, int],
                    max_message_bytes: int) -> Encoded | None:
    """encode_batch by the compiled twin: what encode_records returns and raises, or None (nothing
    done) for a batch it leaves to Python: columns of other types than bytes and int, numbers beyond
    the format's fields. A tag's hash is computed, not looked up (it is one short CRC in C)."""
    got = _recordc.encode(batch.data, batch.queues, batch.tags, batch.idempotency_keys, batch.flags,
                          timestamp, position, next_offsets, max_message_bytes)
    if got is None:
        return None
    if isinstance(got, int):  # the index of the first record over a limit
        _check_message(batch.data[got], batch.queues[got], batch.tags[got] if batch.tags else b"",
                       batch.idempotency_keys[got] if batch.idempotency_keys else b"",
                       batch.flags[got] if batch.flags else 0, max_message_bytes)
        raise AssertionError(f"record {got} is within the limits the compiled encoder says it breaks")
    buf, positions, queues, offsets, counts, entries = got
    return buf, AppendedBatch(timestamp, positions, queues, offsets, counts), entries


def encode_records(batch: MessageColumns, timestamp: int, position: int, next_offsets: dict[int, int],
                   max_message_bytes: int, tag_hash_of: dict[bytes, int]) -> Encoded:
    """encode_batch one record at a time: one pack and one CRC per record."""
    parts: list[bytes] = []
    add = parts.append
    positions: list[int] = []
    add_position = positions.append
    queue_column: list[int] = []
    offset_column: list[int] = []
    counts: list[int] = []
    entries: dict[int, list[int]] = {}
    n = len(batch.data)
    last = n - 1
    prev = 0  # the previous record's length suffix travels in the next record's prefix pack
    ts_lo, ts_hi = timestamp & 0xFFFFFFFF, timestamp >> 32
    head_one, short_max, pack_short = _HEAD_ONE, SHORT_MAX, _pack_short
    short_data = min(SHORT_MAX - HEADER_SIZE - 12, max_message_bytes)  # data that always takes a short frame
    columns = zip(batch.data, batch.queues, batch.tags or itertools.repeat(b"", n),
                  batch.idempotency_keys or itertools.repeat(b"", n), batch.flags or itertools.repeat(0, n),
                  strict=True)
    for i, (data, queues, tag, idem, flags) in enumerate(columns):
        counts.append(len(queues))
        if not tag and not idem and len(queues) == 1 and len(data) <= short_data and not flags & ~CALLER_FLAGS \
                and i != last:
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
            queue_column.append(q)
            offset_column.append(o)
            position += plen + 6
            continue
        dl, tl, il = len(data), len(tag), len(idem)
        if dl > max_message_bytes or flags & ~CALLER_FLAGS or tl > MAX_U16 or il > MAX_U16 or len(queues) > MAX_U16:
            _check_message(data, queues, tag, idem, flags, max_message_bytes)
        layout = L_END if i == last else 0
        if tl:
            layout |= L_TAG
        if il:
            layout |= L_IDEM
        placed: list[tuple[int, int]] = []
        for q in queues:
            o = next_offsets[q]
            next_offsets[q] = o + 1
            placed.append((q, o))
            queue_column.append(q)
            offset_column.append(o)
        lengths = (U16.pack(tl) if tl else b"") + (U16.pack(il) if il else b"")
        if len(placed) == 1:
            q, o = placed[0]
            code = (0 if q < 0x100 else 1 if q < 0x10000 else 2) | (
                0 if o < 0x10000 else 4 if o < 0x1000000 else 8 if o < 0x100000000 else 12)
            layout |= code
            placement = head_one[code](0, 0, 0, 0, q, o)[HEADER_SIZE:]
            placements = placement[:-1] if code & 12 == THREE else placement
        else:
            layout |= L_MULTI
            placements = U16.pack(len(placed)) + b"".join([MULTI.pack(q, o) for q, o in placed])
        payload = _FIXED.pack(ts_lo, ts_hi, flags, layout) + lengths + placements + tag + idem + data
        plen = len(payload)
        crc = crc32(payload)
        if plen <= short_max and prev <= short_max:
            add(pack_short(prev, plen, crc))
        else:
            add(_frame(prev, plen, crc))
        add(payload)
        prev = plen
        size = plen + (FRAME if plen <= short_max else LONG_FRAME)
        length = size | _tag_hash(tag, tag_hash_of) << 32 if tl else size  # the index entry's second u64
        for q, _ in placed:
            e = entries.get(q)
            if e is None:
                entries[q] = [position + 1, length]
            else:
                e += (position + 1, length)
        add_position(position)
        position += size
    add(_suffix(prev))
    parts[0] = parts[0][1:]  # drop the suffix slot in front of the first record (a short zero)
    appended = AppendedBatch(timestamp, positions, queue_column, offset_column,
                             None if counts.count(1) == n else counts)
    packed = {q: (pack_entries(flat), sum(flat[1::2]) & 0xFFFFFFFF) for q, flat in entries.items()}
    return b"".join(parts), appended, packed


_ROW = 48  # bytes per record of encode_columns' header matrix: the widest header (38) and a u64's spill


def encode_columns(batch: MessageColumns, timestamp: int, position: int, next_offsets: dict[int, int],
                   max_message_bytes: int, tag_hash_of: dict[bytes, int]) -> Encoded:
    """encode_batch for a whole batch at once: every record's frame and header as numpy columns,
    written into a matrix of one row per record, cut into pieces by one struct call and joined with
    the bodies by one more; a record's CRC is two crc32 calls (its head's, carried over its body).
    Python loops only over records with a tag, an idempotency key or other than one placement."""
    import numpy as np

    data, queues = batch.data, batch.queues
    n = len(data)
    i64, u64 = np.int64, np.uint64

    def lengths(column: list[bytes] | None) -> Any:
        return np.fromiter(map(len, column), i64, n) if column is not None else np.zeros(n, i64)

    dl, tl, il = lengths(data), lengths(batch.tags), lengths(batch.idempotency_keys)
    flags = np.array(batch.flags, i64) if batch.flags is not None else np.zeros(n, i64)
    uniform = queues.count(queues[0]) == n  # nearly always: every message to the same queues
    counts = np.full(n, len(queues[0]), i64) if uniform else np.fromiter(map(len, queues), i64, n)

    # Errors as encode_records raises them: the first record over a limit, or an unknown queue before it.
    bad = (dl > max_message_bytes) | (counts > MAX_U16)
    if batch.tags is not None or batch.idempotency_keys is not None:
        bad |= (tl > MAX_U16) | (il > MAX_U16)
    if batch.flags is not None:
        bad |= (flags < 0) | (flags > CALLER_FLAGS)
    if bad.any():
        i = int(bad.argmax())
        for q in itertools.chain.from_iterable(queues[:i]):
            next_offsets[q]  # raises for an unknown queue
        _check_message(data[i], queues[i], (batch.tags or [b""] * n)[i], (batch.idempotency_keys or [b""] * n)[i],
                       int(flags[i]), max_message_bytes)

    # Placements: each queue's offsets follow the order of its placements in the batch.
    single = counts == 1
    if uniform and len(queues[0]) == 1:
        (q,) = queues[0]
        base = next_offsets[q]
        next_offsets[q] = base + n
        flat_q, flat_o = np.full(n, q, i64), np.arange(base, base + n, dtype=i64)
        first = np.arange(n)  # each record's first placement in the flat columns
        groups = [(q, 0, n)]
        order = None
        qs, os_ = flat_q, flat_o  # the queue and offset of each record's one placement
    else:
        total = int(counts.sum())
        flat_q = np.tile(np.array(queues[0], i64), n) if uniform else \
            np.fromiter(itertools.chain.from_iterable(queues), i64, total)
        order = np.argsort(flat_q, kind="stable")
        sorted_q = flat_q[order]
        group_start = np.append(0, np.flatnonzero(sorted_q[1:] != sorted_q[:-1]) + 1) if total else np.zeros(0, i64)
        group_end = np.append(group_start[1:], total) if total else group_start
        groups = list(zip(sorted_q[group_start].tolist(), group_start.tolist(), group_end.tolist(), strict=True))
        base_of = {q: next_offsets[q] for q in dict.fromkeys(flat_q.tolist())}  # unknown ids raise in batch order
        bases = np.array([base_of[q] for q, _, _ in groups], i64)
        for (q, a, b), o in zip(groups, bases.tolist(), strict=True):
            next_offsets[q] = o + b - a
        sizes = group_end - group_start
        flat_o = np.empty(total, i64)
        flat_o[order] = np.repeat(bases - group_start, sizes) + np.arange(total)
        first = np.cumsum(counts) - counts
        pick = np.minimum(first, max(total - 1, 0))
        qs = np.where(single, flat_q[pick], 0) if total else np.zeros(n, i64)
        os_ = np.where(single, flat_o[pick], 0) if total else np.zeros(n, i64)

    # Each record's layout and lengths (the module docstring's table). `plain`: every record has one
    # placement in the same queue and no tag or key (nearly every large batch), which saves numpy
    # calls below (each costs about as much as 1,000 records' arithmetic).
    keyed = batch.tags is not None or batch.idempotency_keys is not None
    plain = order is None and not keyed
    has_tag, has_idem = tl > 0, il > 0
    offset_code = 4 * ((os_ >= 0x10000).astype(i64) + (os_ >= 0x1000000) + (os_ >= 0x100000000))
    if order is None:
        code = offset_code + _queue_code(int(qs[0]))
        layout = code.copy()
        width = np.asarray(WIDTH)[code]
    else:
        code = np.where(single, offset_code + (qs >= 0x100) + (qs >= 0x10000), 0)
        layout = np.where(single, code, L_MULTI)
        width = np.where(single, np.asarray(WIDTH)[code], 2 + 12 * counts)
    if keyed:
        layout |= has_tag * L_TAG | has_idem * L_IDEM
    layout[-1] |= L_END
    plen = HEADER_SIZE + width + dl
    if keyed:
        plen += 2 * has_tag + 2 * has_idem + tl + il
    long = plen > SHORT_MAX
    fw = np.where(long, 5, 1)  # prefix and suffix width
    size = plen + 2 * fw + CRC_SIZE
    starts = np.cumsum(size) - size

    # The header matrix: row i holds record i-1's suffix, record i's prefix, a CRC slot, the fixed
    # header, the tag and key lengths and the placement (or the placement count). Each field is one
    # u64 store at its byte position: a store's zero high bytes spill onto the next field's place,
    # which that field's own store then overwrites.
    matrix = np.zeros(n * _ROW + 8, np.uint8)
    at = np.ndarray((n * _ROW,), "<u8", matrix, 0, (1,))  # unaligned: element i is the u64 at byte i
    row = c = np.arange(0, n * _ROW, _ROW)
    uplen = plen.astype(u64)
    prev = np.empty(n, u64)  # the previous record's payload length (its suffix), and whether long
    prev[0], prev[1:] = 0, uplen[:-1]
    prev_long = prev > SHORT_MAX
    suffix_width = np.where(prev_long, 5, 1)
    suffix_width[0] = 0
    at[c] = np.where(prev_long, prev | u64(0xFF << 32), prev)
    c = c + suffix_width
    at[c] = np.where(long, uplen << u64(8) | u64(0xFF), uplen)
    c = c + fw + CRC_SIZE
    fixed = u64(timestamp) | layout.astype(u64) << u64(56)
    at[c] = fixed if batch.flags is None else fixed | flags.astype(u64) << u64(48)
    c = c + HEADER_SIZE
    if has_tag.any():
        at[c[has_tag]] = tl[has_tag].astype(u64)
        c = c + 2 * has_tag
    if has_idem.any():
        at[c[has_idem]] = il[has_idem].astype(u64)
        c = c + 2 * has_idem
    if order is None:  # one queue
        at[c] = u64(qs[0])
        at[c + _QUEUE_WIDTH[_queue_code(int(qs[0]))]] = os_.astype(u64)
    else:
        at[c[single]] = qs[single].astype(u64)
        at[(c + np.asarray(_QUEUE_WIDTH)[code & 3])[single]] = os_[single].astype(u64)
        at[c[~single]] = counts[~single].astype(u64)
    # Each row cut into two pieces by one struct call: the framing up to the CRC slot, and the
    # payload's head (slicing per record costs five times as much).
    frame_width = suffix_width + fw + CRC_SIZE
    head_width = c - row - frame_width + (width if order is None else np.where(single, width, 2))
    # an ndarray is a buffer; numpy's stubs do not say so
    pieces = _cutter(frame_width, head_width).unpack_from(matrix)  # type: ignore[arg-type]
    heads = pieces[1::2]

    # What follows the head of the other records: several placements, the tag and the key.
    bodies = data
    th = np.zeros(n, u64)
    special = [] if plain else np.flatnonzero(~single | has_tag | has_idem).tolist()
    if special:
        bodies = list(data)
        multi = np.empty(len(flat_q), [("q", "<u4"), ("o", "<u8")])
        multi["q"], multi["o"] = flat_q, flat_o
        placed = multi.tobytes()
        tags = batch.tags or [b""] * n
        keys = batch.idempotency_keys or [b""] * n
        firsts, many = first.tolist(), counts.tolist()
        for i in special:
            tag = tags[i]
            more = b"" if many[i] == 1 else placed[12 * firsts[i] : 12 * (firsts[i] + many[i])]
            bodies[i] = more + tag + keys[i] + data[i]
            if tag:
                th[i] = _tag_hash(tag, tag_hash_of)

    # A payload's CRC is its head's CRC carried on over its body: two calls, no slice of the buffer.
    crcs = np.fromiter(map(crc32, bodies, map(crc32, heads)), np.uint32, n)
    parts: list[bytes] = [b""] * (3 * n + 1)
    parts[0 : 3 * n : 3] = pieces[0::2]
    parts[1 : 3 * n : 3] = heads
    parts[2 : 3 * n : 3] = bodies
    parts[3 * n] = _suffix(int(plen[-1]))
    buf = bytearray().join(parts)
    raw = np.frombuffer(buf, np.uint8)
    np.ndarray((len(buf) - 3,), "<u4", raw, 0, (1,))[starts + fw] = crcs
    del raw

    # Index entries per queue, in offset order: (position + 1, length | tag_hash << 32), as u64 pairs
    entry = np.empty((n, 2), "<u8")
    entry[:, 0] = starts + position + 1
    entry[:, 1] = size if plain else size.astype(u64) | th << u64(32)
    if order is None:
        entries = {groups[0][0]: (entry.tobytes(), len(buf))}
    else:
        placed_records = np.repeat(np.arange(n), counts)[order]
        packed = entry[placed_records].tobytes()
        ends = np.cumsum(size[placed_records]).tolist()
        entries = {q: (packed[ENTRY_SIZE * a : ENTRY_SIZE * b], ends[b - 1] - (ends[a - 1] if a else 0))
                   for q, a, b in groups}
    appended = AppendedBatch(timestamp, (starts + position).tolist(), flat_q.tolist(), flat_o.tolist(),
                             None if single.all() else counts.tolist())
    return bytes(buf), appended, entries


def _cutter_of(runs: tuple[tuple[int, int, int], ...]) -> struct.Struct:
    return struct.Struct("".join(f"{f}s{h}s{_ROW - f - h}x" * k for f, h, k in runs))


# A batch's cutter is kept while its shape repeats (a struct of 1,000 rows takes about 70 KB, of
# 10,000 rows 700 KB: a few, for batches of a few runs; others are built each time).
_cached_cutter_of = functools.lru_cache(maxsize=16)(_cutter_of)


def _cutter(frame_width: Any, head_width: Any) -> struct.Struct:
    """The struct that cuts every row of encode_columns' matrix into its two pieces, one per run of
    rows of the same widths (a batch has a few: the first record has no suffix before it, and the
    offsets' width grows at 65536 and 2**24)."""
    import numpy as np

    changes = (frame_width[1:] != frame_width[:-1]) | (head_width[1:] != head_width[:-1])
    first = [0, *(np.flatnonzero(changes) + 1).tolist()]
    runs = [b - a for a, b in itertools.pairwise([*first, len(frame_width)])]
    shape = tuple(zip(frame_width[first].tolist(), head_width[first].tolist(), runs, strict=True))
    return _cached_cutter_of(shape) if len(shape) <= 8 else _cutter_of(shape)


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


def columns(buf: bytes, starts: Any, lengths: Any, verify: Any) -> tuple[Any, ...]:
    """The fields of the format-2 records at ``starts`` of ``buf`` (whose index entries say
    ``lengths``), for all rows at once: (timestamps, flags, tag_start, tag_len, data_start, data_len,
    valid) as numpy arrays. A row is valid when its prefix and suffix agree with its length, its
    fields fit and (where the bool array ``verify`` says so) its CRC matches; an invalid row's fields
    are zeros. By the compiled twin where it runs, else columns_python."""
    import numpy as np

    if _recordc is None:
        return columns_python(buf, starts, lengths, verify)
    n = len(starts)
    out = np.empty((6, n), np.int64)
    ok = np.empty(n, bool)
    _recordc.columns(buf, np.ascontiguousarray(starts.astype(np.int64, copy=False)),
                     np.ascontiguousarray(lengths.astype(np.int64, copy=False)),
                     np.ascontiguousarray(np.broadcast_to(verify, n), bool), out, ok)
    return (*out, ok)


def columns_python(buf: bytes, starts: Any, lengths: Any, verify: Any) -> tuple[Any, ...]:
    """columns, parsed with numpy: the CRCs are the one loop per row (or per run of rows)."""
    import numpy as np

    size = len(buf)
    b = np.frombuffer(buf + bytes(32), np.uint8)  # the padding keeps every probe of a bad record in range
    s = starts.astype(np.int64)
    n = lengths.astype(np.int64)
    ok = (s >= 0) & (n >= FRAME + HEADER_SIZE) & (n <= size - s)  # not s + n: it may wrap
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
    data_len = end - data_start
    if not ok.all():  # an invalid row's fields were read from wherever its bad lengths pointed
        for column in (ts, flags, tag_start, tl, data_start, data_len):
            column[~ok] = 0
    return ts, flags, tag_start, tl, data_start, data_len, ok


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
