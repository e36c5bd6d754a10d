"""Messages as the broker stores and delivers them.

The storage engine keeps an opaque `data` blob per record. The broker puts the JSON members of the
message that never change into it, already encoded, without the braces:

    "exchange":"orders","routing_key":"orders.eu","headers":{"k":"v"},"tag":"created","body":"text"

(`"body_base64":"..."` instead of `"body"` for binary messages, flag FLAG_BINARY). Delivering a message
is then one bytes-format call that wraps that blob with the members that vary (queue, offset, id,
timestamp, delivery_count): pull and browse never decode and re-encode a body (EQueue's "return the
binary as stored"). The offline chunk reader decodes it with `decode_data`.
"""

from __future__ import annotations

import binascii
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from app.broker.errors import InvalidInput, NotFound
from app.broker.names import MAX_ROUTING_KEY

FLAG_BINARY = 1
FLAG_SCOPED_KEY = 2  # the record's idempotency key is scoped to its publish target (app/broker/dedup.py)
MAX_SHORT_TEXT = 255  # tags and idempotency keys
NUL = "\0"  # refused in routing keys, header names and values, tags and idempotency keys
_BACKSLASH = 0x5C  # starts every JSON escape, \u0000 among them
NO_HEADERS: dict[str, str] = {}  # shared, never mutated: most messages carry no headers
_FIELDS = frozenset({"body", "body_base64", "routing_key", "headers", "tag", "idempotency_key"})


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
    keyed, bare = _defaults(exchange, False), _defaults(exchange, True)
    routing_keys: list[str] = []
    blobs: list[bytes] = []
    full: dict[int, Outgoing] = {}
    add_key, add_blob, dumps = routing_keys.append, blobs.append, orjson.dumps
    for i, item in enumerate(raw, first_index):
        if type(item) is dict and type(item.get("body")) is str:
            size = len(item)
            if size == 2:
                routing_key = item.get("routing_key")
                if type(routing_key) is str and len(routing_key) <= MAX_ROUTING_KEY and NUL not in routing_key:
                    add_key(routing_key)
                    add_blob(keyed + dumps(item)[1:-1])
                    continue
            elif size == 1:
                add_key("")
                add_blob(bare + dumps(item)[1:-1])
                continue
        out = _parse_any(item, exchange, i, limits)
        full[i - first_index] = out
        add_key(out.routing_key)
        add_blob(out.data)
    return ParsedBatch(routing_keys, blobs, full)


def parse_message(raw: Any, exchange: str, index: int, limits: MessageLimits) -> Outgoing:
    """Validate one message object (``index`` names it in errors) and encode its stored blob."""
    batch = parse_batch([raw], exchange, limits, index)
    return batch.full.get(0) or Outgoing(batch.routing_keys[0], NO_HEADERS, None, None, batch.blobs[0], 0)


_DEFAULTS: dict[tuple[str, bool], bytes] = {}


def _defaults(exchange: str, without_routing_key: bool) -> bytes:
    """The stored members a plain text message does not carry itself (cached per exchange)."""
    prefix = _DEFAULTS.get((exchange, without_routing_key))
    if prefix is None:
        prefix = b'"exchange":%b,%b"headers":{},"tag":null,' % (
            orjson.dumps(exchange), b'"routing_key":"",' if without_routing_key else b"")
        if len(_DEFAULTS) < 10_000:
            _DEFAULTS[(exchange, without_routing_key)] = prefix
    return prefix


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
        body, flags, body_field = raw["body"], 0, "body"
        if type(body) is not str:
            raise InvalidInput(f"messages[{index}].body must be a string (use body_base64 for bytes)")
    elif "body_base64" in raw:
        body, flags, body_field = raw["body_base64"], FLAG_BINARY, "body_base64"
        if type(body) is not str or not _is_base64(body):
            raise InvalidInput(f"messages[{index}].body_base64 must be valid base64")
    else:
        raise InvalidInput(f"messages[{index}] needs a body or body_base64")
    data = orjson.dumps(
        {"exchange": exchange, "routing_key": routing_key, "headers": headers, "tag": tag, body_field: body}
    )[1:-1]
    # The encoded members decide cheaply whether the exact checks are needed: JSON writes a NUL as
    # \u0000 (a body may hold one), and names and values never take more UTF-8 bytes than the whole.
    # An int membership test is a memchr; a bytes needle costs several times more.
    if (_BACKSLASH in data and b"\\u0000" in data) or len(data) > limits.max_header_bytes:
        _check_fields(routing_key, headers, tag, index, limits)
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
        raise NotFound(f"no message with id {message_id_!r}", code="message_not_found") from None


def render(queue_json: bytes, offset: int, position: int, timestamp: int, data: bytes, delivery_count: int) -> bytes:
    """The JSON of one delivered message (API.md "Messages as delivered")."""
    return b'{"queue":%b,"offset":%d,"id":"%016x","timestamp":%d,%b,"delivery_count":%d}' % (
        queue_json, offset, position, timestamp, data, delivery_count,
    )


def decode_data(data: bytes) -> dict[str, Any]:
    """The stored members as a dict (slow path: base64 re-encoding, the offline reader)."""
    result: dict[str, Any] = orjson.loads(b"{" + data + b"}")
    return result


def as_base64(page: bytes) -> bytes:
    """Re-render a JSON document of messages (`{"messages": [...]}` or one message) with
    `body_base64` for every text body (requests with encoding=base64). A slow path by design."""
    doc = orjson.loads(page)
    for message in doc.get("messages", [doc]):
        if "body" in message:
            message["body_base64"] = binascii.b2a_base64(message.pop("body").encode(), newline=False).decode()
    return orjson.dumps(doc)
