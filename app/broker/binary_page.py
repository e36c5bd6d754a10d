"""Delivered messages as a binary batch (docs/api.md "Binary batches"), rendered from columns.

A pull of first deliveries reads its records as columns (Store.read_columns: numpy arrays and one
buffer holding every record) and this renders the answer from them without a Python object per
message: the stored blobs are parsed by blob.py's `parse` (the one the Arrow pages use too), and each
region of the answer (chunkmq.wire's layout) is cut out of the buffer in one pass. It gives the same
bytes as `render_binary` over the same messages (tests/broker/test_binary_page.py). Text with JSON
escapes is unescaped record by record; blobs of the older JSON-members layout go through
`render_binary`.

numpy is imported on the first binary pull, so serving JSON never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunkmq.broker import blob
from chunkmq.broker.message import _BACKSLASH, _unescaped, render_binary
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
    blobs = blob.parse(buf, page.data_start, page.data_len)
    if blobs.odd.any():  # the older JSON-members layout, or a blob shorter than its head says
        return render_binary(_rows(page, counts))
    binary = blobs.binary
    (ex_start, ex_len), (key_start, key_len), (hd_start, hd_len) = blobs.exchange, blobs.routing_key, blobs.headers
    exchanges, ex_len = _text(raw, buf, ex_start, ex_len, None)
    keys, key_len = _text(raw, buf, key_start, key_len, None)
    bodies, body_len = _text(raw, buf, *blobs.body, binary)
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
