"""Messages as the broker stores and delivers them.

The storage engine keeps an opaque `data` blob per record (blob.py owns its layout), next to the
message's tag (the record's own tag field). This module validates what a publish carries and encodes
its blobs, and renders stored blobs as delivered messages (JSON, or binary batches: chunkmq.wire).

Text stays in its JSON-escaped form, so delivering a message is one bytes-format call over slices of
the blob plus the members that vary (queue, offset, id, timestamp, tag, delivery_count): pull and
browse never decode and re-encode a text body (EQueue's "return the binary as stored"). A binary
body is base64-encoded on delivery.

Blobs of the older JSON-members form (first byte `blob.FORMAT1`) are read by `render` and
`decode_data` too.
"""

from __future__ import annotations

import binascii
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from chunkmq.broker.blob import FORMAT1, HAS_ROUTING_KEY, HEAD, LONG, blob_fields, encode_blob, text_blobs
from chunkmq.broker.errors import InvalidInput, NotFound, TooLarge
from chunkmq.broker.expiry import EXPIRES_HEADER, FLAG_EXPIRES, MAX_TTL_MS
from chunkmq.broker.names import MAX_ROUTING_KEY
from chunkmq.storage.model import AppendedBatch, StoredMessage
from chunkmq.wire import batch as wire
from chunkmq.wire import codes

FLAG_BINARY = 1  # (also in the blob's head) kept on the record for readers of the flags column
FLAG_SCOPED_KEY = 2  # the record's idempotency key is scoped to its publish target (app/broker/dedup.py)
MAX_SHORT_TEXT = 255  # tags and idempotency keys
NUL = "\0"  # refused in routing keys, header names and values, tags and idempotency keys
_BACKSLASH = 0x5C  # starts every JSON escape, \u0000 among them
NO_HEADERS: dict[str, str] = {}  # shared, never mutated: most messages carry no headers
_FIELDS = frozenset({"body", "body_base64", "routing_key", "headers", "tag", "idempotency_key", "ttl_ms"})



@dataclass(slots=True)
class Outgoing:
    """One validated message of a publish request, ready to be routed and stored."""

    routing_key: str
    headers: dict[str, str]
    tag: str | None
    idempotency_key: str | None
    data: bytes
    flags: int


@dataclass(frozen=True, slots=True)
class MessageLimits:
    """What one message's headers may hold (settings max_headers and max_header_bytes)."""

    max_headers: int
    max_header_bytes: int  # UTF-8 bytes of every header name and value together


# Dead-lettering re-publishes a message that was within the limits with its x-death-* headers added.
UNBOUNDED = MessageLimits(sys.maxsize, sys.maxsize)


@dataclass(slots=True)
class ParsedBatch:
    """The messages of a publish body, validated. Nearly every message is plain (a text body and at
    most a routing key): those are only a routing key and a stored blob, in two columns; the others
    are also kept whole in `full`, by index."""

    routing_keys: list[str]
    blobs: list[bytes]
    full: dict[int, Outgoing]


def parse_batch(raw: list[Any], exchange: str, limits: MessageLimits, first_index: int = 0) -> ParsedBatch:
    """Validate the message objects of a publish body and encode their stored blobs."""
    # The fast path: the blob of a plain message is the request's own JSON behind the defaults of the
    # members it lacks, and no object is built for it. This loop was a quarter of the server's CPU in
    # the produce benchmark when every message built a dict, and still half of it with one object each.
    # Per message: one orjson call for the body; the blob's head up to the body is cached per
    # (exchange, routing key), which repeat.
    routing_keys: list[str] = []
    blobs: list[bytes] = []
    full: dict[int, Outgoing] = {}
    add_key, add_blob, dumps = routing_keys.append, blobs.append, orjson.dumps
    heads = _heads_of(exchange)
    for i, item in enumerate(raw, first_index):  # plain_message, inlined: a call per message was a third more
        if type(item) is dict and type(body := item.get("body")) is str:
            size = len(item)
            if size == 2:
                routing_key = item.get("routing_key")
                if type(routing_key) is str:
                    head = heads.get(routing_key)
                    if head is None and len(routing_key) <= MAX_ROUTING_KEY and NUL not in routing_key:
                        head = _head(heads, exchange, routing_key)
                    if head is not None:
                        add_key(routing_key)
                        add_blob(head + dumps(body)[1:-1])
                        continue
            elif size == 1:
                add_key("")
                add_blob(_head(heads, exchange, "") + dumps(body)[1:-1])
                continue
        out = _parse_any(item, exchange, i, limits)
        full[i - first_index] = out
        add_key(out.routing_key)
        add_blob(out.data)
    return ParsedBatch(routing_keys, blobs, full)


def plain_message(item: Any, exchange: str) -> tuple[str, bytes] | None:
    """The routing key and stored blob of a plain message (a text body and at most a routing key),
    or None for any other, which `_parse_any` validates: what parse_batch does for one message, without
    its lists (a single-message publish)."""
    if type(item) is not dict or type(body := item.get("body")) is not str:
        return None
    size = len(item)
    if size == 1:
        routing_key = ""
    elif size != 2 or type(routing_key := item.get("routing_key")) is not str:
        return None
    heads = _heads_of(exchange)
    head = heads.get(routing_key)
    if head is None:
        if len(routing_key) > MAX_ROUTING_KEY or NUL in routing_key:
            return None
        head = _head(heads, exchange, routing_key)
    return routing_key, head + orjson.dumps(body)[1:-1]


def parse_message(raw: Any, exchange: str, index: int, limits: MessageLimits) -> Outgoing:
    """Validate one message object (``index`` names it in errors) and encode its stored blob."""
    batch = parse_batch([raw], exchange, limits, index)
    return batch.full.get(0) or Outgoing(batch.routing_keys[0], NO_HEADERS, None, None, batch.blobs[0], 0)


_HEADS: dict[str, dict[str, bytes]] = {}


def _heads_of(exchange: str) -> dict[str, bytes]:
    heads = _HEADS.get(exchange)
    if heads is None:
        heads = {}
        if len(_HEADS) < 1000:
            _HEADS[exchange] = heads
    return heads


def _head(heads: dict[str, bytes], exchange: str, routing_key: str) -> bytes:
    """The blob of a plain text message up to its body (cached per exchange and routing key)."""
    head = heads.get(routing_key)
    if head is None:
        head = encode_blob(_escaped(exchange), _escaped(routing_key), None, b"", False)
        if len(heads) < 10_000:
            heads[routing_key] = head
    return head


def _escaped(text: str) -> bytes:
    """A string as JSON writes it, without the quotes."""
    return orjson.dumps(text)[1:-1]


def _parse_any(raw: Any, exchange: str, index: int, limits: MessageLimits) -> Outgoing:
    """Every other shape: full validation, then one dict encoded with orjson."""
    if type(raw) is not dict:
        raise InvalidInput(f"messages[{index}] must be an object")
    if not raw.keys() <= _FIELDS:
        unknown = ", ".join(sorted(raw.keys() - _FIELDS))
        raise InvalidInput(f"messages[{index}] has unknown fields: {unknown}")
    routing_key = raw.get("routing_key", "")
    if type(routing_key) is not str or len(routing_key) > MAX_ROUTING_KEY:
        raise InvalidInput(f"messages[{index}].routing_key must be a string of at most {MAX_ROUTING_KEY} characters")
    headers = NO_HEADERS if raw.get("headers") in (None, {}) else raw["headers"]  # not false, 0, ""
    if headers is not NO_HEADERS:
        if type(headers) is not dict or not all(type(v) is str for v in headers.values()):
            raise InvalidInput(f"messages[{index}].headers must be an object of strings")
        if len(headers) > limits.max_headers:
            raise InvalidInput(
                f"messages[{index}].headers has {len(headers)} entries; at most {limits.max_headers} are allowed")
    tag = _short_text(raw.get("tag"), index, "tag")
    key = _short_text(raw.get("idempotency_key"), index, "idempotency_key")
    if key is not None and NUL in key:
        raise InvalidInput(f"messages[{index}].idempotency_key must not contain NUL characters")
    if "body" in raw:
        if "body_base64" in raw:
            raise InvalidInput(f"messages[{index}] has both body and body_base64")
        body, flags = raw["body"], 0
        if type(body) is not str:
            raise InvalidInput(f"messages[{index}].body must be a string (use body_base64 for bytes)")
    elif "body_base64" in raw:
        body, flags = raw["body_base64"], FLAG_BINARY
        if type(body) is not str or not _is_base64(body):
            raise InvalidInput(f"messages[{index}].body_base64 must be valid base64")
    else:
        raise InvalidInput(f"messages[{index}] needs a body or body_base64")
    headers_json = orjson.dumps(headers) if headers else None
    meta = _escaped(routing_key) + (headers_json or b"") + (_escaped(tag) if tag is not None else b"")
    ttl = raw.get("ttl_ms")
    # The encoded members decide cheaply whether the exact checks are needed: JSON writes a NUL as
    # \u0000, and names and values never take more UTF-8 bytes than the whole. An int membership
    # test is a memchr; a bytes needle costs several times more.
    if (_BACKSLASH in meta and b"\\u0000" in meta) or len(meta) > limits.max_header_bytes:
        _check_fields(routing_key, headers, tag, index, limits)
    if ttl is not None:  # its expiry travels in the stored headers (app/broker/expiry.py)
        if type(ttl) is float and ttl.is_integer():  # JSON has one number type: 5000.0 is 5000
            ttl = int(ttl)
        if type(ttl) is not int or not 1 <= ttl <= MAX_TTL_MS:
            raise InvalidInput(f"messages[{index}].ttl_ms must be an integer from 1 to {MAX_TTL_MS}")
        headers = {**headers, EXPIRES_HEADER: str(time.time_ns() // 1_000_000 + ttl)}
        headers_json = orjson.dumps(headers)
        flags |= FLAG_EXPIRES
    if flags & FLAG_BINARY:
        data = encode_blob(_escaped(exchange), _escaped(routing_key), headers_json, binascii.a2b_base64(body), True)
    else:
        data = encode_blob(_escaped(exchange), _escaped(routing_key), headers_json, _escaped(body), False)
    return Outgoing(routing_key, headers, tag, key, data, flags)


def _check_fields(routing_key: str, headers: dict[str, str], tag: str | None, index: int,
                  limits: MessageLimits) -> None:
    """The exact checks of what a message may carry besides its body: no NUL characters, and the
    header bytes within the limit."""
    if NUL in routing_key:
        raise InvalidInput(f"messages[{index}].routing_key must not contain NUL characters")
    if tag is not None and NUL in tag:
        raise InvalidInput(f"messages[{index}].tag must not contain NUL characters")
    text = "".join(headers) + "".join(headers.values())
    if NUL in text:
        raise InvalidInput(f"messages[{index}].headers: names and values must not contain NUL characters")
    if len(text.encode()) > limits.max_header_bytes:
        raise InvalidInput(
            f"messages[{index}].headers hold more than {limits.max_header_bytes} bytes of names and values")


def _short_text(value: Any, index: int, name: str) -> str | None:
    if value is None:
        return None
    if type(value) is not str or not 0 < len(value) <= MAX_SHORT_TEXT:
        raise InvalidInput(f"messages[{index}].{name} must be a string of 1-{MAX_SHORT_TEXT} characters")
    return value


def _is_base64(text: str) -> bool:
    try:
        binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return True


def position_of(message_id_: str) -> int:
    """Ids are the record's global position in 16 hex digits (rendered with `%016x`): unique for
    the life of the store, and a direct lookup."""
    try:
        if len(message_id_) != 16:
            raise ValueError
        return int(message_id_, 16)
    except ValueError:
        raise NotFound(f"no message with id {message_id_!r}", code=codes.MESSAGE_NOT_FOUND) from None


_PLAIN = (b'{"queue":%b,"offset":%d,"id":"%016x","timestamp":%d,"exchange":"","routing_key":"%b","headers":{},'
          b'"tag":%b,"body":"%b","delivery_count":%d}')
_FULL = (b'{"queue":%b,"offset":%d,"id":"%016x","timestamp":%d,"exchange":"%b","routing_key":"%b","headers":%b,'
         b'"tag":%b,"%b":"%b","delivery_count":%d}')
_TAGS: dict[bytes, bytes] = {}


def tag_json(tag: bytes) -> bytes:
    """A stored tag as a JSON value (null for none), cached: tags repeat."""
    if not tag:
        return b"null"
    j = _TAGS.get(tag)
    if j is None:
        j = orjson.dumps(tag.decode(errors="replace"))
        if len(_TAGS) < 10_000:
            _TAGS[tag] = j
    return j


def render(queue_json: bytes, offset: int, position: int, timestamp: int, tag: bytes, data: bytes,
           delivery_count: int) -> bytes:
    """The JSON of one delivered message (API.md "Messages as delivered")."""
    head = data[0] if data else HEAD
    if head == HEAD | HAS_ROUTING_KEY and data[1] != LONG:  # nearly every message: a key and a text body
        n = data[1] + 2
        return _PLAIN % (queue_json, offset, position, timestamp, data[2:n], tag_json(tag), data[n:], delivery_count)
    if head == FORMAT1:
        return b'{"queue":%b,"offset":%d,"id":"%016x","timestamp":%d,%b,"delivery_count":%d}' % (
            queue_json, offset, position, timestamp, data, delivery_count)
    exchange, routing_key, headers, body, binary = blob_fields(data)
    if binary:
        body = binascii.b2a_base64(body, newline=False)
    return _FULL % (queue_json, offset, position, timestamp, exchange, routing_key, headers or b"{}", tag_json(tag),
                    b"body_base64" if binary else b"body", body, delivery_count)


_PLAIN_UNTAGGED = (b'{"queue":%b,"offset":%d,"id":"%016x","timestamp":%d,"exchange":"","routing_key":"%b",'
                   b'"headers":{},"tag":null,"body":"%b","delivery_count":%d}')


def render_all(queue_json: bytes, taken: Iterable[tuple[StoredMessage, int]]) -> list[bytes]:
    """`render` for each (stored message, delivery count), with the common shape inlined: a page
    of pull or browse is this loop, one bytes-format call per message."""
    out: list[bytes] = []
    add = out.append
    plain, keyed = _PLAIN_UNTAGGED, HEAD | HAS_ROUTING_KEY
    for (offset, position, timestamp, _, tag, data), count in taken:
        if data[0] == keyed and not tag and data[1] != LONG:
            n = data[1] + 2
            add(plain % (queue_json, offset, position, timestamp, data[2:n], data[n:], count))
            continue
        add(render(queue_json, offset, position, timestamp, tag, data, count))
    return out


def _text(escaped: bytes) -> str:
    if _BACKSLASH not in escaped:
        return escaped.decode()
    return orjson.loads(b'"%b"' % escaped)  # type: ignore[no-any-return]


def decode_data(data: bytes, tag: bytes = b"") -> dict[str, Any]:
    """The stored members (and the record's tag) as a dict with API.md's names: exchange, routing_key,
    headers, tag, body or body_base64 (slow path: redelivery, the offline reader)."""
    if data and data[0] == FORMAT1:
        result: dict[str, Any] = orjson.loads(b"{" + data + b"}")
        return result
    exchange, routing_key, headers, body, binary = blob_fields(data) if data else (b"", b"", None, b"", False)
    out: dict[str, Any] = {
        "exchange": _text(exchange), "routing_key": _text(routing_key),
        "headers": orjson.loads(headers) if headers is not None else {},
        "tag": tag.decode(errors="replace") if tag else None,
    }
    if binary:
        out["body_base64"] = binascii.b2a_base64(body, newline=False).decode()
    else:
        out["body"] = _text(body)
    return out


def body_bytes(data: bytes) -> bytes:
    """The body of a stored message as bytes (UTF-8 for text)."""
    fields = decode_data(data)
    if "body_base64" in fields:
        return binascii.a2b_base64(fields["body_base64"])
    return str(fields["body"]).encode()


def as_base64(page: bytes) -> bytes:
    """Re-render a JSON document of messages (`{"messages": [...]}` or one message) with
    `body_base64` for every text body (requests with encoding=base64). A slow path by design."""
    doc = orjson.loads(page)
    for message in doc.get("messages", [doc]):
        if "body" in message:
            message["body_base64"] = binascii.b2a_base64(message.pop("body").encode(), newline=False).decode()
    return orjson.dumps(doc)


# ---------------------------------------------------------------------------- the binary batch body

# The binary batch body's layouts are chunkmq.wire.batch's; these turn its records into stored blobs
# and stored blobs into delivered batches.
_ESCAPED = bytes(range(0x20)) + b'"\\'  # what JSON escapes in a string; orjson leaves the rest as it is


def parse_binary_batch(body: bytes, exchange: str, max_messages: int) -> ParsedBatch:
    """The records of a binary publish body (wire.MEDIA_TYPE), validated, as stored blobs.

    Raises InvalidInput for a malformed body (400) and TooLarge past `max_messages` (413)."""
    try:
        columns = wire.decode_publish(body, max_messages)
    except wire.TooManyRecords as e:
        raise TooLarge(str(e), code=codes.BATCH_TOO_LARGE) from None
    except wire.MalformedBatch as e:
        raise InvalidInput(str(e)) from None
    key_lens, n = columns.key_lengths, len(columns.key_lengths)
    first = body[columns.keys_start:columns.keys_start + key_lens[0]]
    one_key = key_lens.count(key_lens[0]) == n and body[columns.keys_start:columns.bodies_start] == first * n
    if one_key:  # the common batch (a queue publish: the empty key)
        routing_keys = [_routing_key(first, 0)] * n
    else:
        raw_keys = wire.slices(body, columns.keys_start, key_lens)
        known = {raw: _routing_key(raw, raw_keys.index(raw)) for raw in set(raw_keys)}
        routing_keys = [known[raw] for raw in raw_keys]
    heads = _heads_of(exchange)
    by_key = {key: _head(heads, exchange, key) for key in (routing_keys[:1] if one_key else set(routing_keys))}
    if not any(columns.flags):
        # Text bodies that JSON leaves as they are (no quote, backslash or control character) are
        # stored as they came, after the blob's head: for a batch of such ASCII text, which one pass
        # over the bodies tells, a blob is one concatenation.
        if one_key:
            blobs = text_blobs(by_key[routing_keys[0]], body, columns.bodies_start, columns.body_lengths)
            if blobs is not None:
                return ParsedBatch(routing_keys, blobs, {})
        else:
            texts = text_blobs(b"", body, columns.bodies_start, columns.body_lengths)
            if texts is not None:
                key_heads = map(by_key.__getitem__, routing_keys)
                return ParsedBatch(routing_keys, list(map(bytes.__add__, key_heads, texts)), {})
    payloads = wire.slices(body, columns.bodies_start, columns.body_lengths)
    stored: list[bytes] = []
    full: dict[int, Outgoing] = {}
    for i, (key, payload, flag) in enumerate(zip(routing_keys, payloads, columns.flags, strict=True)):
        if flag:
            blob = encode_blob(_escaped(exchange), _escaped(key), None, payload, True)
            # bodies of bytes are all a binary batch puts in `full` (_publish_now's one-message path counts on it)
            full[i] = Outgoing(key, NO_HEADERS, None, None, blob, FLAG_BINARY)
        else:
            try:
                text = payload.decode()
            except UnicodeDecodeError:
                raise InvalidInput(f"record {i}: a text body must be UTF-8 (flag 1 marks bytes)") from None
            blob = by_key[key] + (payload if _as_json(payload) else _escaped(text))
        stored.append(blob)
    return ParsedBatch(routing_keys, stored, full)


def _as_json(text: bytes) -> bool:
    """Whether JSON writes this UTF-8 text as it is (a translate is ten times faster than a regex)."""
    return len(text.translate(None, _ESCAPED)) == len(text)


def _routing_key(raw: bytes, index: int) -> str:
    try:
        key = raw.decode()
    except UnicodeDecodeError:
        raise InvalidInput(f"record {index}: the routing key is not UTF-8") from None
    if len(key) > MAX_ROUTING_KEY or NUL in key:
        raise InvalidInput(
            f"record {index}: the routing key must be at most {MAX_ROUTING_KEY} characters without NUL")
    return key


def render_results(appended: AppendedBatch, names: dict[int, bytes]) -> bytes:
    """The results of a binary publish as a binary batch (wire.encode_results). `names` holds the
    name of every queue placed in."""
    offsets = appended.offsets
    if len(names) == 1:  # a queue publish, or one route: the same name for every placement
        (name,) = names.values()
        lengths, region = bytes((len(name),)) * len(offsets), name * len(offsets)
    else:
        queues = appended.queues
        lengths, region = bytes([len(names[q]) for q in queues]), b"".join([names[q] for q in queues])
    return wire.encode_results(appended.positions, appended.counts, offsets, lengths, region)


def _unescaped(escaped: bytes) -> bytes:
    """JSON-escaped text (a blob's) back to its UTF-8 bytes."""
    return escaped if _BACKSLASH not in escaped else _text(escaped).encode()


def render_binary(stored: Sequence[tuple[int, int, int, bytes, bytes, int]]) -> bytes:
    """Delivered messages (offset, id, timestamp, tag, stored blob, delivery count) as a binary batch.
    The common blob (a routing key and a text body) is cut by slicing; text is unescaped only where
    the batch holds a backslash."""
    n = len(stored)
    offsets, positions, timestamps, tags, blobs, counts = zip(*stored, strict=True) if n else ((),) * 6
    keyed = HEAD | HAS_ROUTING_KEY
    bare = all(b[0] == HEAD for b in blobs)  # text without exchange, routing key or headers
    joined: list[bytes | None] = [None] * 5  # a region already joined (checked for escapes on the way)
    if bare or all(b[0] == keyed and b[1] != LONG for b in blobs):  # nearly every batch: slices
        if bare:
            keys, bodies = [b""] * n, [b[1:] for b in blobs]
        else:
            ends = [b[1] + 2 for b in blobs]
            keys = [b[2:e] for b, e in zip(blobs, ends, strict=True)]
            bodies = [b[e:] for b, e in zip(blobs, ends, strict=True)]
        exchanges, headers, flags = [b""] * n, [b""] * n, [0] * n
        joined[0] = joined[3] = b""
        joined[1] = b"" if bare else b"".join(keys)
        if _BACKSLASH in joined[1]:
            keys, joined[1] = [_unescaped(k) for k in keys], None
        joined[4] = b"".join(bodies)
        if _BACKSLASH in joined[4]:
            bodies, joined[4] = [_unescaped(b) for b in bodies], None
    else:
        exchanges, keys, headers, bodies, flags = [], [], [], [], []
        for blob, tag in zip(blobs, tags, strict=True):
            if blob[:1] == b'"':  # a record in the older JSON-members form
                members = decode_data(blob, tag)
                exchange, key = members["exchange"].encode(), members["routing_key"].encode()
                head = orjson.dumps(members["headers"]) if members["headers"] else b""
                binary = "body_base64" in members
                body = binascii.a2b_base64(members["body_base64"]) if binary else members["body"].encode()
            else:
                exchange, key, head_or_none, body, binary = blob_fields(blob)
                exchange, key, head = _unescaped(exchange), _unescaped(key), head_or_none or b""
                if not binary:
                    body = _unescaped(body)
            exchanges.append(exchange)
            keys.append(key)
            headers.append(head)
            bodies.append(body)
            flags.append(wire.BINARY if binary else 0)
    regions = (exchanges, keys, tags, headers, bodies)
    columns = (offsets, positions, timestamps, counts, flags,
               *([0] * n if j == b"" else list(map(len, r)) for r, j in zip(regions, joined, strict=True)))
    region_bytes = [b"".join(r) if j is None else j for r, j in zip(regions, joined, strict=True)]
    return wire.encode_delivered(n, columns, region_bytes)


def render_one(offset: int, position: int, ts: int, tag: bytes, blob: bytes, count: int) -> bytes | None:
    """render_binary of one message, for the common blob (a text body, with or without a routing
    key, nothing to unescape): a batch of one is its row, packed at once. None for any other blob."""
    head = blob[0]
    if head == HEAD:
        key, body = b"", blob[1:]
    elif head == HEAD | HAS_ROUTING_KEY and blob[1] != LONG:
        end = blob[1] + 2
        key, body = blob[2:end], blob[end:]
    else:
        return None
    if _BACKSLASH in body or _BACKSLASH in key:
        return None
    return wire.encode_delivered_one((offset, position, ts, count, 0, 0, len(key), len(tag), 0, len(body)),
                                     (b"", key, tag, b"", body))
