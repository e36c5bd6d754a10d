"""The stored message blob: what the broker keeps in a record's opaque `data` (the one owner of its
layout). `encode_blob` writes one, `blob_fields` reads one, `parse` reads a page of them with numpy::

    size   field
    1      head      0x80 | 0x01 exchange | 0x02 routing key | 0x04 headers | 0x08 binary body
    1 | 3  length    of the exchange, with 0x01: one byte 0..254, or 0xFF then u16
    ..     exchange  as JSON escapes it, without the quotes
    1 | 3  length    of the routing key, with 0x02 (as above)
    ..     routing key, JSON-escaped, without the quotes
    1 | 3  length    of the headers, with 0x04 (as above)
    ..     headers   the JSON object as orjson writes it (`{"k":"v"}`)
    ..     body      the rest: a text body JSON-escaped without the quotes; a binary body raw

What is empty is left out: the default exchange "", an empty routing key, no headers (a 100-byte
text body with a 9-character routing key is a 111-byte blob). The message's tag is not in the blob:
it is the record's own tag field (the index hashes it for filtered reads).

Records written before this layout hold the JSON members themselves, without the braces
(`"exchange":"","headers":{},"tag":null,"routing_key":"k","body":"text"`): their first byte is a
quote (`FORMAT1`, 0x22), which no head byte is (message.py's `decode_data` reads them).

numpy is imported by `parse` and `text_blobs` only, so serving JSON never loads it. Both have a
compiled twin (_blobc.c), run where it is built and CHUNKMQ_PURE_PYTHON is not set; the Python code
stays the reference and the fallback.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

HEAD = 0x80
HAS_EXCHANGE = 0x01
HAS_ROUTING_KEY = 0x02
HAS_HEADERS = 0x04
BINARY = 0x08
MEMBERS = (HAS_EXCHANGE, HAS_ROUTING_KEY, HAS_HEADERS)  # in the order they follow the head
FORMAT1 = 0x22  # the first byte of a blob written in the older JSON-members form
LONG = 0xFF  # a length byte saying the length follows as u16


def _compiled() -> tuple[Any, str]:
    """The compiled twin of `parse` and `text_blobs` (_blobc.c), or None where it is not built or CHUNKMQ_PURE_PYTHON
    is set; and which parser runs, in words."""
    if os.environ.get("CHUNKMQ_PURE_PYTHON", "") not in ("", "0"):
        return None, "pure Python (CHUNKMQ_PURE_PYTHON is set)"
    try:
        from . import _blobc
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    return _blobc, "compiled"


_blobc, IMPLEMENTATION = _compiled()


def _length(n: int) -> bytes:
    return bytes((n,)) if n < LONG else b"\xff" + n.to_bytes(2, "little")


def encode_blob(exchange: bytes, routing_key: bytes, headers: bytes | None, body: bytes, binary: bool) -> bytes:
    """The stored blob of one message. ``exchange`` and ``routing_key`` are JSON-escaped without
    their quotes (b"" for the default exchange and no key), ``headers`` the JSON object or None for
    none, ``body`` JSON-escaped text, or raw with ``binary``. Each of exchange, routing key and
    headers is at most 65535 bytes."""
    head = HEAD | (BINARY if binary else 0)
    parts = [b""]
    if exchange:
        head |= HAS_EXCHANGE
        parts += (_length(len(exchange)), exchange)
    if routing_key:
        head |= HAS_ROUTING_KEY
        parts += (_length(len(routing_key)), routing_key)
    if headers is not None:
        head |= HAS_HEADERS
        parts += (_length(len(headers)), headers)
    parts[0] = bytes((head,))
    parts.append(body)
    return b"".join(parts)


def blob_fields(data: bytes) -> tuple[bytes, bytes, bytes | None, bytes, bool]:
    """(exchange, routing key, headers, body, binary) of a blob written by `encode_blob`: slices of
    it, as encode_blob took them (JSON-escaped text; headers a JSON object or None)."""
    head = data[0]
    p = 1
    fields: list[bytes | None] = []
    for bit in MEMBERS:
        if head & bit:
            n = data[p]
            if n == LONG:
                n = int.from_bytes(data[p + 1 : p + 3], "little")
                p += 2
            fields.append(data[p + 1 : p + 1 + n])
            p += 1 + n
        else:
            fields.append(None if bit == HAS_HEADERS else b"")
    exchange, routing_key, headers = fields
    return exchange or b"", routing_key or b"", headers, data[p:], bool(head & BINARY)


def text_blobs(head: bytes, buffer: bytes, start: int, lengths: list[int]) -> list[bytes] | None:
    """`head` followed by each piece of `buffer` cut by `lengths` from `start`, when every piece is
    ASCII text that JSON writes as it is (no control character, quote or backslash): the stored
    blobs of a batch of such text bodies, which the blob keeps as they came. None when one is not."""
    if _blobc is not None and (blobs := _blobc.text_blobs(head, buffer, start, lengths)) is not None:
        return blobs  # type: ignore[no-any-return]
    import numpy as np

    text = buffer[start:start + sum(lengths)]
    # the quote and the backslash by memchr, control characters by numpy's minimum: a tenth of a translate's time
    if (not text.isascii() or b'"' in text or b"\\" in text
            or (text and int(np.frombuffer(text, np.uint8).min()) < 0x20)):
        return None
    ends = itertools.accumulate(lengths, initial=start)
    return [head + buffer[a:b] for a, b in itertools.pairwise(ends)]


@dataclass(slots=True)
class Blobs:
    """A page of blobs as columns: each member as (start, length) in the page's buffer (length 0 for
    a member a blob does not have). Rows in `odd` are not blobs of this layout that the parse could
    read (the older JSON-members form, empty data, or shorter than their head says): their members
    are meaningless and a caller reads them one by one (`blob_fields`, `decode_data`)."""

    head: np.ndarray
    exchange: tuple[np.ndarray, np.ndarray]
    routing_key: tuple[np.ndarray, np.ndarray]
    headers: tuple[np.ndarray, np.ndarray]
    body: tuple[np.ndarray, np.ndarray]
    binary: np.ndarray  # bool: the body is raw bytes
    odd: np.ndarray  # bool


def parse(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> Blobs:
    """The blobs at (start, length) of `buf` (uint8) as columns, with a numpy pass per member present
    in the page: no Python loop over the rows. Probes past a short blob are clamped into the buffer
    (such rows come out odd). By the compiled twin where it runs (one pass over the rows)."""
    import numpy as np

    n = len(start)
    if _blobc is not None:
        out, flags = np.empty(9 * n, np.int64), np.empty(2 * n, bool)
        if _blobc.parse(buf, start, length, out, flags):  # None: arrays it leaves to numpy
            c, f = out.reshape(9, n), flags.reshape(2, n)
            return Blobs(c[0], (c[1], c[2]), (c[3], c[4]), (c[5], c[6]), (c[7], c[8]), f[0], f[1])
    if not len(buf):  # every blob empty (odd): something to clamp the probes into
        buf = np.zeros(1, np.uint8)
    last = len(buf) - 1
    end = start + length
    head = np.where(length > 0, buf[np.minimum(start, last)], 0).astype(np.int64)
    present = int(np.bitwise_or.reduce(head)) if n else 0
    p = start + 1
    none = np.zeros(n, np.int64)
    members = []
    for bit in MEMBERS:  # each present one: its length (one byte, or LONG then u16), then it
        if not present & bit:  # no row has it (a page shares its exchange and has no headers)
            members.append((p, none))
            continue
        has = (head & bit) != 0
        first = np.where(has, buf[np.minimum(p, last)], 0).astype(np.int64)
        long = first == LONG
        if long.any():
            low, high = buf[np.minimum(p + 1, last)].astype(np.int64), buf[np.minimum(p + 2, last)].astype(np.int64)
            first = np.where(long, low | high << 8, first)
        begin = p + has + 2 * long
        members.append((begin, first))
        p = begin + first
    odd = ((head & 0xF0) != HEAD) | (p > end)
    return Blobs(head, members[0], members[1], members[2], (p, end - p), (head & BINARY) != 0, odd)
