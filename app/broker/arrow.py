"""Browse pages as Apache Arrow IPC streams (`GET /api/v1/queues/{q}/messages?format=arrow`).

The columns are the Spark source's schema (`schema()`). They are built column by column, without a
Python object per message: the stored blobs (message.py: JSON members without the braces) are
joined into one buffer and read with numpy. In a blob with no backslash every quote delimits a
string, so the quotes pair up: a string followed by a colon is a key, the next string its value,
and each column is a set of (start, length) views into the buffer that Arrow copies out in C++.
Rows that do not fit that shape (escapes, headers, binary bodies) are decoded one by one with
orjson and patched in; nearly every message of a bulk read takes the vector path.

pyarrow and numpy are imported on the first Arrow request, so serving JSON never loads them.
"""

from __future__ import annotations

import binascii
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from app.broker.message import FLAG_BINARY, decode_data

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from app.broker.broker import Broker

MEDIA_TYPE = "application/vnd.apache.arrow.stream"
_HEX = b"0123456789abcdef"


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


def browse_arrow(broker: Broker, name: str, offset: int | None, timestamp: int | None, limit: int) -> tuple[bytes, int]:
    """A page of a queue as an Arrow IPC stream, and the offset after it (as Broker.browse)."""
    queue = broker.queue(name)
    store = broker.store
    if timestamp is not None:
        offset = store.offset_for_timestamp(queue.id, timestamp)
    elif offset is None:
        offset = store.first_offset(queue.id)
    stored = store.read(queue.id, offset, limit)
    next_offset = stored[-1][0] + 1 if stored else max(offset, store.first_offset(queue.id))
    return ipc_stream(name, stored), next_offset


def ipc_stream(queue: str, stored: list[tuple[int, int, int, int, bytes, bytes]]) -> bytes:
    """Stored tuples (offset, position, timestamp, flags, tag, data) as one Arrow IPC stream."""
    import pyarrow as pa

    sch = schema()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sch) as writer:
        if stored:
            writer.write_batch(record_batch(queue, stored, sch))
    return sink.getvalue().to_pybytes()


def record_batch(queue: str, stored: list[tuple[int, int, int, int, bytes, bytes]], sch: pa.Schema) -> pa.RecordBatch:
    """The columns of one page of stored tuples (tests/broker/test_arrow.py checks them against orjson)."""
    import numpy as np
    import pyarrow as pa

    n = len(stored)
    offsets_, positions, timestamps, flags, _, datas = (list(map(itemgetter(i), stored)) for i in range(6))
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, datas), np.int64, n), out=bounds[1:])
    joined = b"".join(datas)
    buf = np.frombuffer(joined, np.uint8)
    row_of = _row_finder(bounds)
    # Rows the vector path cannot read: an escape anywhere, binary bodies, headers (below).
    slow = np.zeros(n, bool)
    escaped = np.flatnonzero(buf == 0x5C) if b"\\" in joined else np.zeros(0, np.int64)  # memchr first
    slow[row_of(escaped)] = True
    slow |= (np.fromiter(flags, np.int64, n) & FLAG_BINARY).astype(bool)
    # Without escapes, quotes come in pairs that delimit the strings: a key is a string followed by
    # a colon, and its value (when a string) is the next pair.
    quotes = np.flatnonzero(buf == 0x22)
    if len(escaped):  # their quotes would break the pairing
        quotes = quotes[~slow[row_of(quotes)]]
    opens, closes = quotes[0::2], quotes[1::2]
    after = buf[np.minimum(closes + 1, len(buf) - 1)]
    keys = np.flatnonzero(after == 0x3A)  # ':'
    key_len = closes[keys] - opens[keys] - 1
    first = buf[opens[keys] + 1]
    string_value = buf[np.minimum(closes[keys] + 2, len(buf) - 1)] == 0x22
    headers_used = (first == 0x68) & (key_len == 7) & (buf[np.minimum(closes[keys] + 3, len(buf) - 1)] != 0x7D)
    slow[row_of(opens[keys[headers_used]])] = True

    def column(initial: int, length: int, typ: pa.DataType, nullable: bool = False) -> pa.Array:
        """The string value of the key of this first letter and length, for every fast row."""
        hit = keys[(first == initial) & (key_len == length) & string_value]
        rows = row_of(opens[hit])
        begin = np.zeros(n, np.int64)
        size = np.zeros(n, np.int64)
        begin[rows] = opens[hit + 1] + 1
        size[rows] = closes[hit + 1] - opens[hit + 1] - 1
        valid = None
        if nullable:
            present = np.zeros(n, bool)
            present[rows] = True
            valid = present | slow
        return _views(buf, joined, begin, size, valid).cast(typ)

    exchange = column(0x65, 8, pa.string())  # exchange
    routing_key = column(0x72, 11, pa.string())  # routing_key
    tag = column(0x74, 3, pa.string(), nullable=True)  # tag
    body = column(0x62, 4, pa.binary())  # body
    headers = _maps(np.zeros(n + 1, np.int32), [], [])
    if slow.any():
        exchange, routing_key, tag, headers, body = _patch(slow, datas, flags, exchange, routing_key, tag, headers, body)
    pos = np.fromiter(positions, np.uint64, n).astype(">u8").view(np.uint8).reshape(n, 8)
    table = np.frombuffer(_HEX, np.uint8)
    hexed = np.empty((n, 16), np.uint8)
    hexed[:, 0::2] = table[pos >> 4]
    hexed[:, 1::2] = table[pos & 15]
    ids = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32)),
                                                   pa.py_buffer(hexed)])
    ts = pa.array(np.fromiter(timestamps, np.int64, n) * 1000, pa.timestamp("us", tz="UTC"))
    columns = [
        _repeat(queue, n), pa.array(np.fromiter(offsets_, np.int64, n)), ids, ts,
        exchange, routing_key, tag, headers, body,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=sch)


def _repeat(text: str, n: int) -> pa.Array:
    """A string column holding ``text`` n times, from its buffers."""
    import numpy as np
    import pyarrow as pa

    raw = text.encode()
    offsets = np.arange(0, len(raw) * n + 1, len(raw) or 1, dtype=np.int64)[: n + 1] if raw else np.zeros(n + 1, np.int64)
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]).cast(pa.string())


def _maps(offsets: np.ndarray, keys: list[str], items: list[str]) -> pa.Array:
    """A map<string,string> column from its offsets (MapArray.from_arrays is ~1000x slower here)."""
    import pyarrow as pa

    entries = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(items, pa.string())],
        fields=[pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())],
    )
    typ = pa.map_(pa.string(), pa.string())
    return pa.Array.from_buffers(typ, len(offsets) - 1, [None, pa.py_buffer(offsets)], children=[entries])


def _row_finder(bounds: np.ndarray) -> Any:
    import numpy as np

    def row_of(byte_positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(bounds, byte_positions, side="right") - 1

    return row_of


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


def _patch(slow: np.ndarray, datas: tuple[bytes, ...], flags: tuple[int, ...], *cols: pa.Array) -> list[pa.Array]:
    """Decode the rows the vector path could not read with orjson, and put them in place."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    exchange, routing_key, tag, headers, body = cols
    rows = np.flatnonzero(slow)
    decoded: list[dict[str, Any]] = [decode_data(datas[i]) for i in rows]
    bodies = [
        binascii.a2b_base64(m["body_base64"]) if flags[i] & FLAG_BINARY else m["body"].encode()
        for i, m in zip(rows, decoded, strict=True)
    ]
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
        put(tag, [m["tag"] for m in decoded]),
        headers,
        put(body, bodies),
    ]
