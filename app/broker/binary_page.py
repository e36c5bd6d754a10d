"""Delivered messages as a binary batch (docs/api.md "Binary batches"), rendered from columns.

A pull of first deliveries reads its records as columns (Store.read_columns: numpy arrays and one
buffer holding every record) and this renders the answer from them without a Python object per
message: the stored blobs (message.py) are parsed with numpy, as the Arrow read path parses them
(the head byte says which of exchange, routing key and headers follow, each behind its length),
and each region of the answer is cut out of the buffer in one pass. It gives the same bytes as
`render_binary` over the same messages (tests/broker/test_binary_page.py). Text with JSON escapes
is unescaped record by record; blobs of the older JSON-members layout go through `render_binary`.

numpy is imported on the first binary pull, so serving JSON never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunkmq.broker.message import (
    _BACKSLASH,
    _LONG,
    BINARY,
    HAS_EXCHANGE,
    HAS_HEADERS,
    HAS_ROUTING_KEY,
    HEAD,
    _unescaped,
    render_binary,
)
from chunkmq.storage.model import ColumnPage
from chunkmq.wire import batch as wire

if TYPE_CHECKING:
    import numpy as np


def render_page(page: ColumnPage, counts: int | np.ndarray = 1) -> bytes:
    """The messages of `page` with their delivery counts (one for all, or one per row) as a binary
    batch: what `render_binary` gives for the same messages."""
    import numpy as np

    n = len(page)
    if n == 0:
        return wire.encode_delivered(0, [b""] * 10, [b""] * 5)
    raw = page.buf
    buf = np.frombuffer(raw, np.uint8)
    last = len(buf) - 1  # probes past a malformed blob are clamped into the buffer (it fails below)
    ds, de = page.data_start, page.data_start + page.data_len
    head = buf[np.minimum(ds, last)].astype(np.int64)
    if ((head & 0xF0) != HEAD).any() or not page.data_len.all():  # the older JSON-members layout
        return render_binary(_rows(page, counts))
    u16 = np.ndarray((last,), "<u2", buf, 0, (1,))  # element i: the u16 at byte i
    present = int(np.bitwise_or.reduce(head))
    p = ds + 1
    none = np.zeros(n, np.int64)
    members = []
    for bit in (HAS_EXCHANGE, HAS_ROUTING_KEY, HAS_HEADERS):  # each present one: its length, then it
        if not present & bit:  # no row has it (a batch shares its exchange and has no headers)
            members.append((p, none))
            continue
        has = (head & bit) != 0
        first = np.where(has, buf[np.minimum(p, last)], 0).astype(np.int64)
        long = first == _LONG  # 0xFF, then the length as u16
        length = np.where(long, u16[np.minimum(p + 1, last - 1)], first).astype(np.int64)
        start = p + has + 2 * long
        members.append((start, length))
        p = start + length
    if (p > de).any():  # a blob shorter than its head says: record by record, as render_binary reads it
        return render_binary(_rows(page, counts))
    binary = (head & BINARY) != 0
    (ex_start, ex_len), (key_start, key_len), (hd_start, hd_len) = members
    exchanges, ex_len = _text(raw, buf, ex_start, ex_len, None)
    keys, key_len = _text(raw, buf, key_start, key_len, None)
    bodies, body_len = _text(raw, buf, p, de - p, binary)
    columns = (page.offsets, page.positions, page.timestamps, np.broadcast_to(counts, (n,)), binary, ex_len, key_len,
               page.tag_len, hd_len, body_len)
    regions = (exchanges, keys, _gather(raw, buf, page.tag_start, page.tag_len), _gather(raw, buf, hd_start, hd_len),
               bodies)
    return wire.encode_delivered(n, columns, regions)


def _text(raw: bytes, buf: np.ndarray, start: np.ndarray, length: np.ndarray,
          binary: np.ndarray | None) -> tuple[bytes, np.ndarray]:
    """A region of JSON-escaped text (rows where `binary` is set are raw bytes) as the answer gives
    it, unescaped, and its lengths. Only the rows holding a backslash are unescaped, one by one."""
    import numpy as np

    region = _gather(raw, buf, start, length)
    if _BACKSLASH not in region:
        return region, length
    ends = np.cumsum(length)
    rows = np.unique(np.searchsorted(ends, np.flatnonzero(np.frombuffer(region, np.uint8) == _BACKSLASH), "right"))
    if binary is not None:
        rows = rows[~binary[rows]]
    if not len(rows):
        return region, length
    pieces = [region[a:b] for a, b in zip((ends - length).tolist(), ends.tolist(), strict=True)]
    for i in rows.tolist():
        pieces[i] = _unescaped(pieces[i])
    return b"".join(pieces), np.fromiter(map(len, pieces), np.int64, len(pieces))


def _gather(raw: bytes, buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> bytes:
    """The slices (start, length) of `raw`, joined, in one numpy pass: a strided copy when they lie
    at a fixed stride with one length (messages of one size back to back), else the bytes between
    them masked out; slices out of order (records of older chunks, appended to the buffer) are
    gathered by index."""
    import numpy as np

    total = int(length.sum())
    if total == 0:
        return b""
    n = len(length)
    start = np.broadcast_to(start, (n,))
    first = int(start[0])
    stride = int(start[1] - start[0]) if n > 1 else 0
    if stride >= length[0] and (length == length[0]).all() and (np.diff(start) == stride).all():
        rows = np.lib.stride_tricks.as_strided(buf[first:], (n, int(length[0])), (stride, 1), writeable=False)
        return rows.tobytes()
    end = start + length
    if (start[1:] >= end[:-1]).all():
        # runs of (gap, slice) lengths, the slices kept: one repeat builds the mask
        runs = np.empty(2 * n + 1, np.int64)
        runs[0] = first
        runs[1:-1:2] = length
        runs[2:-1:2] = start[1:] - end[:-1]
        runs[-1] = len(buf) - int(end[-1])
        keep = np.zeros(2 * n + 1, bool)
        keep[1::2] = True
        return buf[np.repeat(keep, runs)].tobytes()
    at = np.repeat(start - (np.cumsum(length) - length), length) + np.arange(total)
    return buf[at].tobytes()


def _rows(page: ColumnPage, counts: int | np.ndarray) -> list[tuple[int, int, int, bytes, bytes, int]]:
    """The page's messages as render_binary takes them (offset, id, timestamp, tag, blob, count)."""
    import numpy as np

    raw = page.buf
    tags = [raw[a:a + m] for a, m in zip(page.tag_start.tolist(), page.tag_len.tolist(), strict=True)]
    blobs = [raw[a:a + m] for a, m in zip(page.data_start.tolist(), page.data_len.tolist(), strict=True)]
    return list(zip(page.offsets.tolist(), page.positions.tolist(), page.timestamps.tolist(), tags, blobs,
                    np.broadcast_to(counts, (len(page),)).tolist(), strict=True))
