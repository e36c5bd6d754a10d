"""The client's side of the binary batch body (`application/vnd.chunkmq.batch`): its layouts are
chunkmq.wire.batch's; this turns the caller's messages into a publish batch and answers into the
client's models.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import orjson

from chunkmq.client._http import Response
from chunkmq.client.models import Message, OutgoingMessage, Placement, Published, PublishResult, PulledBatch
from chunkmq.wire import batch as wire
from chunkmq.wire.batch import BINARY, COUNT, MEDIA_TYPE

__all__ = ["COUNT", "MEDIA_TYPE", "decode", "decode_batch", "encode", "encode_if_plain", "published"]


NEEDS_JSON = ("a binary batch carries bodies and routing keys only: publish headers, tags, idempotency keys, "
              "ttl_ms and delays as JSON (binary=False)")


def encode(messages: Iterable[str | bytes | OutgoingMessage], routing_key: str = "") -> bytes:
    """A binary publish body: str bodies as text, bytes as binary. An OutgoingMessage may carry its
    own routing key, but not headers, a tag or an idempotency key (ValueError: publish those as JSON)."""
    body = encode_if_plain(messages, routing_key)
    if body is None:
        raise ValueError(NEEDS_JSON)
    return body


def encode_if_plain(messages: Iterable[str | bytes | OutgoingMessage], routing_key: str = "") -> bytes | None:
    """The binary publish body of `messages`, or None when one needs JSON (headers, a tag or an
    idempotency key). TypeError for what is not a message."""
    default_key = routing_key.encode()
    if type(messages) is list and messages:  # the common case, text bodies: C loops, no object per message
        try:
            text = "".join(messages)
        except TypeError:  # not all of them str
            text = None
        if text is not None and text.isascii():  # one byte per character: the lengths are the strings'
            return wire.encode_publish_text(list(map(len, messages)), default_key, text.encode())
        if text is not None:
            return wire.encode_publish([m.encode() for m in messages], [default_key] * len(messages),
                                       bytes(len(messages)))
    keys: list[bytes] = []
    bodies: list[bytes] = []
    flags: list[int] = []
    for m in messages:
        key = default_key
        if isinstance(m, OutgoingMessage):
            if (m.headers or m.tag is not None or m.idempotency_key is not None or m.ttl_ms is not None
                    or m.delay_ms is not None or m.deliver_at_ms is not None):
                return None
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
            raise TypeError(f"cannot publish a {type(m).__name__}: give str, bytes or OutgoingMessage")
        keys.append(key)
    return wire.encode_publish(bodies, keys, flags)


def decode(batch: bytes, queue: str) -> list[Message]:
    """The messages of a binary pull answer."""
    if batch[:4] == _ONE:  # a stream's usual frame at low rates: one message, built without the columns
        return [_decode_one(wire.decode_delivered(batch), queue)]
    return decode_batch(batch, queue).messages()


_ONE = COUNT.pack(1)


def _decode_one(d: wire.Delivered, queue: str) -> Message:
    """The one message of a batch of one: what decode_batch(...).messages() gives, field by field."""
    body = d.bodies
    return Message(
        queue, d.offsets[0], f"{int.from_bytes(d.ids, 'little'):016x}", d.timestamps[0],
        d.routing_keys[0].decode() if d.routing_keys else "", d.exchanges[0].decode() if d.exchanges else "",
        orjson.loads(d.headers[0]) if d.headers and d.headers[0] else {},
        (d.tags[0].decode() or None) if d.tags else None,
        body if d.flags[0] & BINARY else body.decode(), d.delivery_counts[0])


def decode_batch(batch: bytes, queue: str) -> PulledBatch:
    """The messages of a binary pull answer as columns: no object per message, and the ids and
    headers only decoded when asked for."""
    d = wire.decode_delivered(batch)
    n = len(d.offsets)
    exchanges, keys, tags, headers = d.exchanges, d.routing_keys, d.tags, d.headers
    # Most records of a batch share their exchange and routing key and have no tag or headers:
    # each distinct value is decoded once, and an empty region is one repeated value.
    texts = {raw: raw.decode() for raw in {*(exchanges or ()), *(keys or ()), *(tags or ())}}
    texts[b""] = ""
    body_ends = list(itertools.accumulate(d.body_lengths, initial=0))
    region = d.bodies
    if d.flags.count(0) == n and region.isascii():  # ASCII text: one decode, cut by the byte lengths
        text = region.decode()
        body_values: list[str | bytes] = [text[a:b] for a, b in itertools.pairwise(body_ends)]
    else:
        body_values = [region[a:b] if f & BINARY else region[a:b].decode()
                       for (a, b), f in zip(itertools.pairwise(body_ends), d.flags, strict=True)]
    ids = d.ids
    return PulledBatch(
        queue, d.offsets, lambda: _hex_ids(ids), d.timestamps,
        list(map(texts.__getitem__, keys)) if keys else [""] * n,
        list(map(texts.__getitem__, exchanges)) if exchanges else [""] * n,
        lambda: [orjson.loads(h) if h else {} for h in headers] if headers else [{} for _ in range(n)],
        [texts[t] or None for t in tags] if tags else [None] * n,
        body_values, d.delivery_counts)


def _hex_ids(column: bytes) -> list[str]:
    """The ids of a u64 little-endian column as 16 hex digits each (the JSON id), in one hex() call:
    the reversed column is the ids' big-endian digits, last record first."""
    digits = column[::-1].hex()
    return [digits[i:i + 16] for i in range(len(digits) - 16, -1, -16)]


def published(answer: Response) -> Published:
    """The binary answer to a binary publish; its results are built on first use."""
    content = answer.content
    (n,) = COUNT.unpack_from(content)
    return Published(None, answer.headers.get("chunkmq-durability", ""), lambda: _results(content), n)


def _results(content: bytes) -> list[PublishResult]:
    ids, counts, offsets, raw_names = wire.decode_results(content)
    names = {raw: raw.decode() for raw in set(raw_names)}
    placements = [Placement(names[raw], o) for raw, o in zip(raw_names, offsets, strict=True)]
    ends = list(itertools.accumulate(counts, initial=0))
    return [PublishResult(f"{i:016x}", placements[a:b], False)
            for i, (a, b) in zip(ids, itertools.pairwise(ends), strict=True)]
