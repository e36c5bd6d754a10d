"""Record encoding: a batch of new messages written as format-2 records (the layout is record.py's),
record by record (encode_records), column by column with numpy (encode_columns), or by the compiled
twin (encode_compiled); all three write the same bytes, and encode_batch picks one."""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Sequence
from typing import Any

from isal.isal_zlib import crc32

from .errors import MessageTooLarge
from .model import AppendedBatch, MessageColumns, NewMessage
from .queue_index import ENTRY_SIZE, pack_entries
from .record import (
    _FIXED,
    _OFFSET_CODES,
    _QUEUE_CODES,
    _QUEUE_WIDTH,
    CALLER_FLAGS,
    CRC_SIZE,
    FRAME,
    HEADER_SIZE,
    L_END,
    L_IDEM,
    L_MULTI,
    L_TAG,
    LONG_FRAME,
    MAX_U16,
    MULTI,
    SHORT_MAX,
    THREE,
    U16,
    U32,
    WIDTH,
    _queue_code,
    _recordc,
)

# timestamp, flags, layout and one placement: the common record's whole header in one pack
_HEAD_ONE = [struct.Struct("<IHBB" + _QUEUE_CODES[c & 3] + _OFFSET_CODES[c >> 2]).pack for c in range(16)]
_pack_short = struct.Struct("<BBI").pack  # the previous record's short suffix, a short prefix, crc




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
