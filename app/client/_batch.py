"""The binary batch body (`application/vnd.chunkmq.batch`, docs/api.md "Binary batches").

Integers little-endian. A batch is a record count n (u32), the records' fixed-size fields as
columns of n values each, then their variable fields, one region per field (the concatenation of
that field over the records, in order).

- Publish: columns body length u32, routing key length u16, flags u8; regions: routing keys
  (UTF-8), bodies.
- The answer to a binary publish: columns id u64 and placement count u16; then the placement
  count (u32), columns queue offset u64 and queue name length u8, and a region of queue names.
- Pull: columns offset u64, id u64, timestamp u64, delivery count u32, flags u8, and the lengths
  of exchange u8, routing key u16, tag u16, headers u32 and body u32; regions in that order
  (headers: a JSON object, empty when there are none).

Flag bit 0: the body is bytes (else UTF-8 text). No JSON and no base64 on either side, and no
Python loop over the records but the one that builds the caller's objects.
"""

from __future__ import annotations

import array
import itertools
import struct
import sys
from collections.abc import Iterable, Sequence

import httpx
import orjson

from chunkmq.broker.columns import column_bytes
from chunkmq.client.models import Message, OutgoingMessage, Placement, Published, PublishResult, PulledBatch

MEDIA_TYPE = "application/vnd.chunkmq.batch"
COUNT = struct.Struct("<I")
KEY_LENGTH = struct.Struct("<H")
PUBLISH_COLUMNS = "IHB"
DELIVERED_COLUMNS = "QQQIBBHHII"
BINARY = 1


def encode(messages: Iterable[str | bytes | OutgoingMessage], routing_key: str = "") -> bytes:
    """A binary publish body: str bodies as text, bytes as binary. An OutgoingMessage may carry its
    own routing key, but not headers, a tag or an idempotency key (publish those as JSON)."""
    default_key = routing_key.encode()
    if type(messages) is list and messages:  # the common case, text bodies: C loops, no object per message
        try:
            text = "".join(messages)
        except TypeError:  # not all of them str
            text = None
        if text is not None and text.isascii():  # one byte per character: the lengths are the strings'
            n = len(messages)
            return b"".join((COUNT.pack(n), column_bytes("I", list(map(len, messages))),
                             KEY_LENGTH.pack(len(default_key)) * n, bytes(n), default_key * n, text.encode()))
        if text is not None:
            return _join([m.encode() for m in messages], [default_key] * len(messages), bytes(len(messages)))
    keys: list[bytes] = []
    bodies: list[bytes] = []
    flags: list[int] = []
    for m in messages:
        key = default_key
        if isinstance(m, OutgoingMessage):
            if m.headers or m.tag is not None or m.idempotency_key is not None:
                raise ValueError("a binary batch carries bodies and routing keys only: publish headers, "
                                 "tags and idempotency keys as JSON (binary=False)")
            if m.routing_key is not None:
                key = m.routing_key.encode()
            m = m.body
        if isinstance(m, str):
            bodies.append(m.encode())
            flags.append(0)
        elif isinstance(m, bytes | bytearray | memoryview):
            bodies.append(bytes(m))
            flags.append(BINARY)
        else:
            raise TypeError(f"cannot publish a {type(m).__name__} in a binary batch: give str, bytes or OutgoingMessage")
        keys.append(key)
    return _join(bodies, keys, flags)


def _join(bodies: list[bytes], keys: list[bytes], flags: Sequence[int]) -> bytes:
    if not bodies:
        raise ValueError("a batch needs at least one message")
    columns = (list(map(len, bodies)), list(map(len, keys)), flags)
    return b"".join((COUNT.pack(len(bodies)), *map(column_bytes, PUBLISH_COLUMNS, columns), *keys, *bodies))


def decode(batch: bytes, queue: str) -> list[Message]:
    """The messages of a binary pull answer."""
    return decode_batch(batch, queue).messages()


def decode_batch(batch: bytes, queue: str) -> PulledBatch:
    """The messages of a binary pull answer as columns: no object per message, and the ids and
    headers only decoded when asked for."""
    (n,) = COUNT.unpack_from(batch)
    pos = COUNT.size
    cols: list[bytes] = []  # each column's bytes, decoded where needed (an all-zero one is not)
    for code in DELIVERED_COLUMNS:
        size = struct.calcsize("<" + code)
        cols.append(batch[pos:pos + n * size])
        pos += n * size
    offsets, timestamps, counts = (_column(code, cols[i]) for i, code in ((0, "Q"), (2, "Q"), (3, "I")))
    binary = cols[4].count(0) != n
    regions: list[list[bytes] | None] = []
    for code, column in zip(DELIVERED_COLUMNS[5:9], cols[5:9], strict=True):
        if column.count(0) == len(column):  # no tags, no headers (a queue publish: no exchange or key)
            regions.append(None)
            continue
        ends = list(itertools.accumulate(_column(code, column), initial=pos))
        regions.append([batch[a:b] for a, b in itertools.pairwise(ends)])
        pos = ends[-1]
    exchanges, keys, tags, headers = regions
    # Most records of a batch share their exchange and routing key and have no tag or headers:
    # each distinct value is decoded once, and an empty region is one repeated value.
    texts = {raw: raw.decode() for raw in {*(exchanges or ()), *(keys or ()), *(tags or ())}}
    texts[b""] = ""
    body_ends = list(itertools.accumulate(_column("I", cols[9]), initial=0))
    region = batch[pos:pos + body_ends[-1]]
    if not binary and region.isascii():  # ASCII text: one decode, cut by the byte lengths
        text = region.decode()
        body_values: list[str | bytes] = [text[a:b] for a, b in itertools.pairwise(body_ends)]
    else:
        body_values = [region[a:b] if f & BINARY else region[a:b].decode()
                       for (a, b), f in zip(itertools.pairwise(body_ends), cols[4], strict=True)]
    ids = batch[COUNT.size + 8 * n:COUNT.size + 16 * n]
    return PulledBatch(
        queue, offsets, lambda: _hex_ids(ids), timestamps,
        list(map(texts.__getitem__, keys)) if keys else [""] * n,
        list(map(texts.__getitem__, exchanges)) if exchanges else [""] * n,
        lambda: [orjson.loads(h) if h else {} for h in headers] if headers else [{} for _ in range(n)],
        [texts[t] or None for t in tags] if tags else [None] * n,
        body_values, counts)


def _hex_ids(column: bytes) -> list[str]:
    """The ids of a u64 little-endian column as 16 hex digits each (the JSON id), in one hex() call:
    the reversed column is the ids' big-endian digits, last record first."""
    digits = column[::-1].hex()
    return [digits[i:i + 16] for i in range(len(digits) - 16, -1, -16)]


def published(answer: httpx.Response) -> Published:
    """The binary answer to a binary publish; its results are built on first use."""
    content = answer.content
    (n,) = COUNT.unpack_from(content)
    return Published(None, answer.headers.get("chunkmq-durability", ""), lambda: _results(content, n), n)


def _results(content: bytes, n: int) -> list[PublishResult]:
    pos = COUNT.size
    ids = _column("Q", content[pos:pos + 8 * n])
    counts = _column("H", content[pos + 8 * n:pos + 10 * n])
    pos += 10 * n
    (p,) = COUNT.unpack_from(content, pos)
    pos += COUNT.size
    offsets = _column("Q", content[pos:pos + 8 * p])
    name_ends = list(itertools.accumulate(_column("B", content[pos + 8 * p:pos + 9 * p]), initial=pos + 9 * p))
    names = {raw: raw.decode() for raw in {content[a:b] for a, b in itertools.pairwise(name_ends)}}
    placements = [Placement(names[content[a:b]], o)
                  for (a, b), o in zip(itertools.pairwise(name_ends), offsets, strict=True)]
    ends = list(itertools.accumulate(counts, initial=0))
    return [PublishResult(f"{i:016x}", placements[a:b], False) for i, (a, b) in zip(ids, itertools.pairwise(ends), strict=True)]


def _column(code: str, raw: bytes) -> list[int]:
    column = array.array(code)
    if column.itemsize != struct.calcsize("<" + code):  # a platform whose C types have other sizes
        return list(struct.unpack(f"<{len(raw) // struct.calcsize('<' + code)}{code}", raw))
    column.frombytes(raw)
    if sys.byteorder == "big":
        column.byteswap()
    return column.tolist()
