"""The binary batch body (`application/vnd.chunkmq.batch`, docs/api.md "Binary batches").

Publishing: one record per message, a header (body length u32, routing key length u16, flags u8)
then the routing key and the body. Pulling: one record per message, a header (body length, offset,
id, timestamp, delivery count, flags, then the lengths of exchange, routing key, tag and headers)
then those fields and the body. Integers little-endian; flag bit 0: the body is bytes.
No JSON and no base64 on either side, so a batch costs a few slices per message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import orjson

from app.client.models import Message, OutgoingMessage

MEDIA_TYPE = "application/vnd.chunkmq.batch"
PUBLISH_RECORD = struct.Struct("<IHB")
DELIVERED_RECORD = struct.Struct("<IQQQIBBHHI")
BINARY = 1


def encode(messages: Iterable[str | bytes | OutgoingMessage], routing_key: str = "") -> bytes:
    """A binary publish body: str bodies as text, bytes as binary. An OutgoingMessage may carry its
    own routing key, but not headers, a tag or an idempotency key (publish those as JSON)."""
    pack = PUBLISH_RECORD.pack
    default_key = routing_key.encode()
    parts: list[bytes] = []
    add = parts.append
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
            body, flags = m.encode(), 0
        elif isinstance(m, bytes | bytearray | memoryview):
            body, flags = bytes(m), BINARY
        else:
            raise TypeError(f"cannot publish a {type(m).__name__} in a binary batch: give str, bytes or OutgoingMessage")
        add(pack(len(body), len(key), flags))
        add(key)
        add(body)
    if not parts:
        raise ValueError("a batch needs at least one message")
    return b"".join(parts)


def decode(records: bytes, queue: str) -> list[Message]:
    """The messages of a binary pull answer."""
    unpack, size = DELIVERED_RECORD.unpack_from, DELIVERED_RECORD.size
    out: list[Message] = []
    add = out.append
    pos, end = 0, len(records)
    while pos < end:
        body_len, offset, position, timestamp, count, flags, exchange_len, key_len, tag_len, headers_len = unpack(
            records, pos)
        pos += size
        exchange = records[pos:pos + exchange_len].decode()
        pos += exchange_len
        routing_key = records[pos:pos + key_len].decode()
        pos += key_len
        tag = records[pos:pos + tag_len].decode() if tag_len else None
        pos += tag_len
        headers = orjson.loads(records[pos:pos + headers_len]) if headers_len else {}
        pos += headers_len
        raw = records[pos:pos + body_len]
        pos += body_len
        add(Message(queue, offset, f"{position:016x}", timestamp, routing_key, exchange, headers, tag,
                    raw if flags & BINARY else raw.decode(), count))
    return out
