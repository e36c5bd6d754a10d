"""Browse pages as Apache Arrow IPC streams (`GET /api/v1/queues/{q}/messages?format=arrow`).

The columns are the Spark source's schema (`schema()`). They are built column by column, without a
Python object per message: the store hands over a page as columns (Store.read_columns: numpy arrays
and one buffer holding every record), and the stored blobs are parsed with numpy too, by blob.py's `parse`
(the one the binary pull answers use). Each string or binary column is copied out of that buffer by one Arrow
take over its (start, length) slices (_gather), the IPC stream is written into one buffer of its size
and sent as it is. Rows that do not fit that shape (JSON escapes in the text, headers, blobs
of the older JSON-members layout) are decoded one by one with
decode_data and patched in; nearly every message of a bulk read takes the vector path.

pyarrow and numpy are imported on the first Arrow request, so serving JSON never loads them.
"""

from __future__ import annotations

import binascii
import functools
from typing import TYPE_CHECKING, Any

from chunkmq.broker import blob
from chunkmq.broker.message import decode_data
from chunkmq.storage.model import ColumnPage

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from chunkmq.broker.broker import Broker

MEDIA_TYPE = "application/vnd.apache.arrow.stream"
_HEX = b"0123456789abcdef"


@functools.cache
def schema() -> pa.Schema:
    """queue, offset, id, timestamp, exchange, routing_key, tag, headers, body (docs/spark.md)."""
    import pyarrow as pa

    return pa.schema([
        ("queue", pa.string()),
        ("offset", pa.int64()),
        ("id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("exchange", pa.string()),
        ("routing_key", pa.string()),
        ("tag", pa.string()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
    ])


def browse_arrow(broker: Broker, name: str, offset: int | None, timestamp: int | None,
                 limit: int) -> tuple[memoryview, int]:
    """A page of a queue as an Arrow IPC stream, and the offset after it (as Broker.browse)."""
    queue = broker.queue(name)
    store = broker.store
    if timestamp is not None:
        offset = store.offset_for_timestamp(queue.id, timestamp)
    elif offset is None:
        offset = store.first_offset(queue.id)
    page = store.read_columns(queue.id, offset, limit)
    next_offset = int(page.offsets[-1]) + 1 if len(page) else max(offset, store.first_offset(queue.id))
    return page_stream(name, page), next_offset


def page_stream(queue: str, page: ColumnPage) -> memoryview:
    """One page of columns as one Arrow IPC stream, written into one buffer of its size (no copies
    as a growing stream would make, none out of Arrow's memory: the response sends this view)."""
    import pyarrow as pa

    sch = schema()
    batch = page_batch(queue, page, sch) if len(page) else None
    # the schema message, the batch's message and the 8-byte end marker; 64 bytes to spare
    size = _schema_size() + (pa.ipc.get_record_batch_size(batch) if batch is not None else 0) + 8 + 64
    out = pa.allocate_buffer(size)
    sink = pa.FixedSizeBufferWriter(out)
    with pa.ipc.new_stream(sink, sch) as writer:
        if batch is not None:
            writer.write_batch(batch)
    return memoryview(out)[: sink.tell()]


@functools.cache
def _schema_size() -> int:
    """The bytes of the schema's message at the head of every stream."""
    return len(schema().serialize())


def ipc_stream(queue: str, stored: list[tuple[int, int, int, int, bytes, bytes]]) -> memoryview:
    """Stored tuples (offset, position, timestamp, flags, tag, data) as one Arrow IPC stream."""
    return page_stream(queue, as_page(stored))


def record_batch(queue: str, stored: list[tuple[int, int, int, int, bytes, bytes]], sch: pa.Schema) -> pa.RecordBatch:
    """The columns of stored tuples (tests/broker/test_arrow.py checks them against decode_data)."""
    return page_batch(queue, as_page(stored), sch)


def as_page(stored: list[tuple[int, int, int, int, bytes, bytes]]) -> ColumnPage:
    """Stored tuples as a ColumnPage (tags and data joined into one buffer)."""
    import numpy as np

    n = len(stored)
    cols = [np.fromiter((row[i] for row in stored), np.int64, n) for i in range(4)]
    sizes = np.zeros(2 * n, np.int64)
    sizes[0::2] = np.fromiter((len(row[4]) for row in stored), np.int64, n)
    sizes[1::2] = np.fromiter((len(row[5]) for row in stored), np.int64, n)
    ends = np.cumsum(sizes)
    buf = b"".join([part for row in stored for part in (row[4], row[5])])
    return ColumnPage(*cols, ends[0::2] - sizes[0::2], sizes[0::2], ends[1::2] - sizes[1::2], sizes[1::2], buf,
                      int(cols[0][-1]) + 1 if n else 0)


def page_batch(queue: str, page: ColumnPage, sch: pa.Schema) -> pa.RecordBatch:
    """The Arrow columns of one page."""
    import numpy as np
    import pyarrow as pa

    n = len(page)
    raw = page.buf
    buf = np.frombuffer(raw or bytes(1), np.uint8)
    blobs = blob.parse(buf, page.data_start, page.data_len)
    # The vector path reads blobs of the current layout without headers; the rest are patched in.
    slow = blobs.odd | ((blobs.head & blob.HAS_HEADERS) != 0)
    # slow rows get empty values (their bytes may not be text in this layout), patched in below
    (ex_start, ex_len), (rk_start, rk_len) = blobs.exchange, blobs.routing_key
    ex_len, rk_len = np.where(slow, 0, ex_len), np.where(slow, 0, rk_len)
    de = page.data_start + page.data_len
    body_start = np.where(slow, de, blobs.body[0])
    exchange = _gather(buf, raw, ex_start, ex_len, pa.string())
    routing_key = _gather(buf, raw, rk_start, rk_len, pa.string())
    has_tag = page.tag_len > 0
    tag = (_gather(buf, raw, page.tag_start, page.tag_len, pa.string(), has_tag) if has_tag.any()
           else pa.nulls(n, pa.string()))
    body = _gather(buf, raw, body_start, de - body_start, pa.binary())
    # JSON escapes (a backslash) in the exchange, the routing key or a text body: those rows are
    # decoded by _patch. Looked for in the columns' values, not in the page's framing bytes.
    binary = blobs.binary
    for col, text_only in ((exchange, False), (routing_key, False), (body, True)):
        slow[_escaped(col, binary if text_only else None)] = True
    headers = _empty_maps(n)
    if slow.any():
        exchange, routing_key, headers, body = _patch(slow, page, exchange, routing_key, headers, body)
    # ids: the positions in hex, two digits per byte from one 256-entry table
    hexed = np.take(_hex_pairs(), page.positions.astype(">u8").view(np.uint8))
    ids = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32)),
                                                   pa.py_buffer(hexed)])
    micros = page.timestamps.astype(np.int64) * 1000
    ts = pa.Array.from_buffers(sch.field("timestamp").type, n, [None, pa.py_buffer(micros)])
    columns = [
        _repeat(queue, n), pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(page.offsets.astype(np.int64))]),
        ids, ts, exchange, routing_key, tag, headers, body,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=sch)


def _repeat(text: str, n: int) -> pa.Array:
    """A string column holding ``text`` n times, from its buffers (a page is far below 2 GiB)."""
    import numpy as np
    import pyarrow as pa

    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


@functools.cache
def _hex_pairs() -> np.ndarray:
    """The two hex digits of each byte value, as one little-endian uint16 each."""
    import numpy as np

    return np.array([_HEX[b >> 4] | _HEX[b & 15] << 8 for b in range(256)], np.uint16)


def _gather(buf: np.ndarray, joined: bytes, begin: np.ndarray, size: np.ndarray, typ: pa.DataType,
            valid: np.ndarray | None = None) -> pa.Array:
    """A binary or string column of the slices (begin, size) of ``joined``, copied out by one Arrow
    take: ``joined`` is read as an array of 2n + 1 values whose odd ones are the slices and the even
    ones the bytes between them, so the slices must lie in order and not overlap (as a page's records
    do). Slices out of order (rows of format-1 chunks appended to the buffer) go through _views."""
    import numpy as np
    import pyarrow as pa

    n = len(begin)
    if not size.any():  # every value empty (the default exchange, no routing keys)
        mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(typ, n, [mask, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")])
    # an empty slice may point anywhere: it is put at the end of the slices before it
    end = np.maximum.accumulate(np.where(size > 0, begin + size, 0)) if n else begin
    start = np.where(size > 0, begin, end)
    if n and (len(joined) >= 2**31 or (start[1:] < end[:-1]).any()):
        return _views(buf, joined, begin, size, valid).cast(typ)
    bounds = np.zeros(2 * n + 1, np.int32)
    bounds[1::2] = start
    bounds[2::2] = end
    spans = pa.Array.from_buffers(typ, 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(joined)])
    out = spans.take(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.arange(1, 2 * n, 2, dtype=np.int32))]))
    if valid is None:
        return out
    mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [mask, *out.buffers()[1:]])


def _escaped(col: pa.Array, binary: np.ndarray | None) -> np.ndarray:
    """The rows of a string or binary column whose value holds a backslash (rows where ``binary``
    is set do not count: a binary body is stored raw)."""
    import numpy as np

    offsets_buf, values_buf = col.buffers()[1:3]
    if values_buf is None:
        return np.zeros(0, np.int64)
    values = np.frombuffer(values_buf, np.uint8)
    offsets = np.frombuffer(offsets_buf, np.int32)[col.offset : col.offset + len(col) + 1]
    values = values[offsets[0] : offsets[-1]]
    if not (values == 0x5C).any():
        return np.zeros(0, np.int64)
    rows = np.searchsorted(offsets, np.flatnonzero(values == 0x5C) + offsets[0], side="right") - 1
    return rows if binary is None else rows[~binary[rows]]


def _empty_maps(n: int) -> pa.Array:
    """A map column of n empty maps."""
    import numpy as np
    import pyarrow as pa

    return pa.Array.from_buffers(pa.map_(pa.string(), pa.string()), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32))],
                                 children=[_no_entries()])


@functools.cache
def _no_entries() -> pa.Array:
    """The entries of empty maps, built once."""
    return _entries([], [])


def _maps(offsets: np.ndarray, keys: list[str], items: list[str]) -> pa.Array:
    """A map<string,string> column from its offsets (MapArray.from_arrays is ~1000x slower here)."""
    import pyarrow as pa

    typ = pa.map_(pa.string(), pa.string())
    return pa.Array.from_buffers(typ, len(offsets) - 1, [None, pa.py_buffer(offsets)], children=[_entries(keys, items)])


def _entries(keys: list[str], items: list[str]) -> pa.Array:
    """The (key, value) structs of a map column."""
    import pyarrow as pa

    return pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(items, pa.string())],
        fields=[pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())],
    )


def _views(buf: np.ndarray, joined: bytes, begin: np.ndarray, size: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """A binary_view array of slices of ``joined``: 16 bytes per row pointing into the buffer, no
    copy of the values (Arrow's cast to binary/string then copies them in C++)."""
    import numpy as np
    import pyarrow as pa

    n = len(begin)
    views = np.zeros((n, 16), np.uint8)
    views[:, 0:4] = size.astype("<i4").view(np.uint8).reshape(n, 4)
    # bytes 4..16: the value itself when it fits (<= 12 bytes), else a 4-byte prefix, buffer 0, offset
    long = size > 12
    short = np.flatnonzero(~long & (size > 0))
    if len(short):
        inline = buf[begin[short, None] + np.arange(12)[None, :].clip(max=size[short, None] - 1)]
        inline[np.arange(12) >= size[short, None]] = 0
        views[short, 4:16] = inline
    if long.any():
        views[long, 4:8] = buf[begin[long, None] + np.arange(4)]
        views[long, 12:16] = begin[long].astype("<i4").view(np.uint8).reshape(-1, 4)
    mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary_view(), n, [mask, pa.py_buffer(views), pa.py_buffer(joined)])


def _patch(slow: np.ndarray, page: ColumnPage, *cols: pa.Array) -> list[pa.Array]:
    """Decode the rows the vector path could not read with decode_data, and put them in place."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    exchange, routing_key, headers, body = cols
    rows = np.flatnonzero(slow)
    raw = page.buf
    decoded: list[dict[str, Any]] = [
        decode_data(raw[page.data_start[i] : page.data_start[i] + page.data_len[i]]) for i in rows.tolist()]
    bodies = [binascii.a2b_base64(m["body_base64"]) if "body_base64" in m else m["body"].encode() for m in decoded]
    mask = pa.array(slow)

    def put(col: pa.Array, values: list[Any]) -> pa.Array:
        return pc.replace_with_mask(col, mask, pa.array(values, col.type))

    n = len(slow)
    # headers: a map column is rebuilt from its offsets (replace_with_mask does not take maps)
    sizes = np.zeros(n, np.int32)
    keys: list[str] = []
    items: list[str] = []
    for i, m in zip(rows, decoded, strict=True):
        h = m.get("headers") or {}
        sizes[i] = len(h)
        keys.extend(h)
        items.extend(h.values())
    map_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=map_offsets[1:])
    headers = _maps(map_offsets, keys, items)
    return [
        put(exchange, [m["exchange"] for m in decoded]),
        put(routing_key, [m["routing_key"] for m in decoded]),
        headers,
        put(body, bodies),
    ]
