"""Search over a queue's log: the request's filters, their validation, the scan and its cursor.

A search reads a range of a queue's offsets through the store's reader (`Store.read`, as browse
does; `Store.read_matching` when a tag is given, which skips other tags by the index's tag hash
without reading their records) and keeps the messages that pass every filter (AND). Before a
record's blob is decoded, a literal prefilter looks for each needle in its raw bytes: a text field
is stored as JSON escapes it, so without a backslash in the blob the text is its UTF-8 bytes, and a
needle that is not in them cannot be in the field. Regular expressions run on RE2 (google-re2):
linear in the input, never a backtracking engine on user input. A JSON path comparison
(`$.order.total > 100`, JsonTest) parses a text body as JSON, after the other body filters' prefilter.

A request stops at its first of: `limit` messages found, `max_scan` messages scanned, `max_ms`
elapsed, the end of its range. Its answer carries a cursor unless the range is done: the request's
filters with the range resolved to offsets (`from_offset` where the scan stopped, `to_offset` the
queue's end when the search began, so a busy queue's search ends), as base64url JSON. Resuming
parses that with the same checks as a request, so a cursor cannot carry what a request could not.

The scan yields to the event loop between slices of messages, so a long search does not stall the
broker's other clients.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import re2

from chunkmq.broker.blob import FORMAT1
from chunkmq.broker.errors import InvalidInput, NotFound
from chunkmq.broker.fields import MAX_INT, boolean, non_negative_int, reject_unknown
from chunkmq.broker.message import FLAG_SCOPED_KEY, decode_data, position_of, render_all
from chunkmq.broker.sources import QueuesSource
from chunkmq.storage import StoredMessage, tag_hash

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
DEFAULT_MAX_SCAN = 100_000
MAX_SCAN = 10_000_000
DEFAULT_MAX_MS = 1000
MAX_MS = 10_000
MAX_NEEDLE = 4096  # characters of a literal or a pattern
MAX_HEADER_FILTERS = 64
SLICE = 1024  # messages read at a time, between two looks at the clock and a yield to the event loop
_RE2_MAX_MEM = 8 << 20  # bytes of one compiled pattern: a huge repetition is refused, not built

FILTERS = ("body_contains", "body_contains_base64", "ignore_case", "body_regex", "header_equals", "header_exists",
           "routing_key", "routing_key_prefix", "tag", "tag_prefix", "message_id", "idempotency_key", "json_path")
RANGE = ("from_offset", "to_offset", "from_timestamp", "to_timestamp")
BUDGETS = ("limit", "max_scan", "max_ms")
FIELDS = (*FILTERS, *RANGE, *BUDGETS, "cursor")


@dataclass(frozen=True, slots=True)
class Query:
    """A validated search: its filters (None: not asked), range and budgets."""

    body_contains: bytes | None = None  # UTF-8 of a text needle, or the bytes of a base64 one
    body_is_text: bool = True  # body_contains came as text (body_contains), not base64
    ignore_case: bool = False
    body_regex: str | None = None
    header_equals: tuple[tuple[str, str], ...] = ()
    header_exists: tuple[str, ...] = ()
    routing_key: str | None = None
    routing_key_prefix: str | None = None
    tag: str | None = None
    tag_prefix: str | None = None
    message_id: str | None = None
    idempotency_key: str | None = None
    json_path: tuple[str, ...] = ()  # comparisons on a JSON body (JsonTest)
    from_offset: int | None = None
    to_offset: int | None = None  # exclusive
    from_timestamp: int | None = None
    to_timestamp: int | None = None  # exclusive
    limit: int = DEFAULT_LIMIT
    max_scan: int = DEFAULT_MAX_SCAN
    max_ms: int = DEFAULT_MAX_MS

    def filters(self) -> dict[str, Any]:
        """The filters as the request names them (what a cursor carries)."""
        out: dict[str, Any] = {}
        if self.body_contains is not None:
            if self.body_is_text:
                out["body_contains"] = self.body_contains.decode()
            else:
                out["body_contains_base64"] = base64.b64encode(self.body_contains).decode()
        if self.ignore_case:
            out["ignore_case"] = True
        if self.header_equals:
            out["header_equals"] = dict(self.header_equals)
        if self.header_exists:
            out["header_exists"] = list(self.header_exists)
        if self.json_path:
            out["json_path"] = list(self.json_path)
        for name in ("body_regex", "routing_key", "routing_key_prefix", "tag", "tag_prefix", "message_id",
                     "idempotency_key"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        return out


@dataclass(slots=True)
class SearchResult:
    """One page of a search: the messages found (as the store reads them) and how the scan went."""

    queue_id: int
    found: list[StoredMessage]
    scanned: int  # messages looked at (those a tag filter skipped by the index included)
    elapsed_ms: float
    next_offset: int  # where the scan stopped: the next offset it would look at
    cursor: str | None  # None: the range is done
    stopped: str  # "limit", "max_scan", "max_ms" or "end"


# ---------------------------------------------------------------------- the request


def _text(body: Mapping[str, Any], field: str, *, empty: bool = False) -> str:
    value = body[field]
    if type(value) is not str or (not value and not empty) or len(value) > MAX_NEEDLE or "\0" in value:
        raise InvalidInput(f"{field} must be a string of 1 to {MAX_NEEDLE} characters without NUL")
    return value


def _budget(body: Mapping[str, Any], field: str, default: int, top: int) -> int:
    if field not in body:
        return default
    value = body[field]
    if type(value) is not int or not 1 <= value <= top:
        raise InvalidInput(f"{field} must be an integer from 1 to {top}")
    return value


def compile_regex(pattern: str, ignore_case: bool) -> Any:
    """The RE2 program of `pattern`; InvalidInput (naming body_regex) when RE2 refuses it (a syntax
    error, a back-reference or look-around RE2 does not have, or a program over its memory budget)."""
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.max_mem = _RE2_MAX_MEM
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise InvalidInput(f"body_regex is not a valid RE2 expression: {detail}") from None


def parse(body: Mapping[str, Any]) -> Query:
    """A search request body (or a cursor's), checked whole: 400 invalid_body naming the field."""
    reject_unknown(body, FIELDS)
    if "cursor" in body:
        given = sorted(body.keys() - {"cursor", *BUDGETS})
        if given:
            raise InvalidInput(f"cursor: a cursor carries the search; leave out {', '.join(given)}")
        inner = dict(_cursor(body["cursor"]))
        inner.update({k: body[k] for k in BUDGETS if k in body})
        return parse(inner)
    q: dict[str, Any] = {}
    if "body_contains" in body and "body_contains_base64" in body:
        raise InvalidInput("body_contains and body_contains_base64: give one of them")
    if "body_contains" in body:
        q["body_contains"] = _text(body, "body_contains").encode()
    if "body_contains_base64" in body:
        raw = body["body_contains_base64"]
        try:
            if type(raw) is not str or not raw:
                raise ValueError
            needle = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("body_contains_base64 must be non-empty base64") from None
        if not needle or len(needle) > MAX_NEEDLE:
            raise InvalidInput(f"body_contains_base64 must hold 1 to {MAX_NEEDLE} bytes")
        q["body_contains"], q["body_is_text"] = needle, False
    q["ignore_case"] = boolean(body, "ignore_case", False)
    if "body_regex" in body:
        q["body_regex"] = _text(body, "body_regex")
        compile_regex(q["body_regex"], q["ignore_case"])
    if "header_equals" in body:
        pairs = body["header_equals"]
        if (type(pairs) is not dict or not pairs or len(pairs) > MAX_HEADER_FILTERS
                or not all(type(k) is str and k and type(v) is str for k, v in pairs.items())):
            raise InvalidInput(f"header_equals must be an object of 1 to {MAX_HEADER_FILTERS} header names "
                               "and their string values")
        q["header_equals"] = tuple(pairs.items())
    if "header_exists" in body:
        names = body["header_exists"]
        if (type(names) is not list or not names or len(names) > MAX_HEADER_FILTERS
                or not all(type(n) is str and n for n in names)):
            raise InvalidInput(f"header_exists must be a list of 1 to {MAX_HEADER_FILTERS} header names")
        q["header_exists"] = tuple(names)
    for name in ("routing_key", "routing_key_prefix", "tag", "tag_prefix", "idempotency_key"):
        if name in body:
            q[name] = _text(body, name, empty=name == "routing_key")
    if "json_path" in body:
        tests = body["json_path"]
        tests = [tests] if type(tests) is str else tests
        if type(tests) is not list or not tests or len(tests) > MAX_HEADER_FILTERS:
            raise InvalidInput(f"json_path must be a comparison or a list of 1 to {MAX_HEADER_FILTERS} of them")
        q["json_path"] = tuple(tests)
        for test in tests:
            JsonTest.parse(test)
    if "message_id" in body:
        value = body["message_id"]
        try:
            if type(value) is not str:
                raise NotFound("")
            position_of(value)
        except NotFound:
            raise InvalidInput("message_id must be a message id (16 hex digits)") from None
        q["message_id"] = value.lower()
    for name in RANGE:
        if name in body:
            q[name] = non_negative_int(body, name)
    q["limit"] = _budget(body, "limit", DEFAULT_LIMIT, MAX_LIMIT)
    q["max_scan"] = _budget(body, "max_scan", DEFAULT_MAX_SCAN, MAX_SCAN)
    q["max_ms"] = _budget(body, "max_ms", DEFAULT_MAX_MS, MAX_MS)
    return Query(**q)


def _cursor(value: Any) -> dict[str, Any]:
    try:
        if type(value) is not str or not value or len(value) > 64 * 1024:
            raise ValueError
        inner = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        if type(inner) is not dict or "cursor" in inner:
            raise ValueError
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidInput("cursor is not a cursor this server gave") from None
    return inner


def make_cursor(query: Query, at: int, end: int) -> str:
    """The cursor that resumes `query` at offset `at` and ends before `end`."""
    inner = {**query.filters(), "from_offset": at, "to_offset": end}
    return base64.urlsafe_b64encode(orjson.dumps(inner)).rstrip(b"=").decode()


# ---------------------------------------------------------------------- JSON path comparisons

_IDENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)")
_INDEX = re.compile(r"\[(0|[1-9][0-9]{0,8})\]")
_KEY = re.compile(r'\[("(?:[^"\\]|\\.)*")\]')
_OP = re.compile(r"\s*(==|!=|<=|>=|<|>)\s*")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class JsonTest:
    """`$.order.total > 100`: a path into a JSON body (`.name`, `["any name"]`, `[index]`), an
    operator, and a JSON value. `==` and `!=` compare JSON values (a number never equals a boolean);
    `<`, `<=`, `>`, `>=` compare two numbers or two strings. A body that is not JSON, or has nothing
    at the path, does not match (`!=` included)."""

    path: tuple[str | int, ...]
    op: str
    value: Any

    @classmethod
    def parse(cls, text: Any) -> JsonTest:
        def bad(why: str) -> InvalidInput:
            return InvalidInput(f"json_path {str(text)[:200]!r}: {why}")

        if type(text) is not str or len(text) > MAX_NEEDLE:
            raise InvalidInput(f"json_path must hold strings of at most {MAX_NEEDLE} characters")
        text = text.strip()
        if not text.startswith("$"):
            raise bad("a path starts with $")
        path: list[str | int] = []
        at = 1
        while True:
            if m := _IDENT.match(text, at):
                path.append(m.group(1))
            elif m := _INDEX.match(text, at):
                path.append(int(m.group(1)))
            elif m := _KEY.match(text, at):
                try:
                    path.append(orjson.loads(m.group(1)))
                except orjson.JSONDecodeError:
                    raise bad("a [\"name\"] step holds a JSON string") from None
            else:
                break
            at = m.end()
        op = _OP.match(text, at)
        if op is None:
            raise bad("the path must be followed by one of == != < <= > >= (a path is $ then .name, "
                      '["name"] or [index] steps)')
        try:
            value = orjson.loads(text[op.end():])
        except orjson.JSONDecodeError:
            raise bad('the value after the operator must be JSON: a number, a "string", true, false or null') from None
        kind = op.group(1)
        if kind not in ("==", "!=") and not (_is_number(value) or type(value) is str):
            raise bad(f"{kind} compares with a number or a string")
        return cls(tuple(path), kind, value)

    def matches(self, document: Any) -> bool:
        node = document
        for step in self.path:
            if type(step) is int:
                node = node[step] if type(node) is list and step < len(node) else _MISSING
            else:
                node = node.get(step, _MISSING) if type(node) is dict else _MISSING
            if node is _MISSING:
                return False
        value, op = self.value, self.op
        if op in ("==", "!="):
            return _same(node, value) is (op == "==")
        if not ((_is_number(node) and _is_number(value)) or (type(node) is str and type(value) is str)):
            return False
        if op == "<":
            return bool(node < value)
        if op == "<=":
            return bool(node <= value)
        if op == ">":
            return bool(node > value)
        return bool(node >= value)


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


# ---------------------------------------------------------------------- the match

class Matcher:
    """Whether one stored message passes every filter of a query; the prefilter first, on the blob's raw bytes."""

    def __init__(self, query: Query) -> None:
        self.query = query
        self.regex = compile_regex(query.body_regex, query.ignore_case) if query.body_regex is not None else None
        self.position = int(query.message_id, 16) if query.message_id is not None else None
        self.json_tests = tuple(JsonTest.parse(t) for t in query.json_path)
        needle = query.body_contains
        self.needle = needle.lower() if needle is not None and query.ignore_case else needle
        # Literals that a matching blob holds as they are (when it has no backslash: see the module doc).
        text: list[bytes] = [k.encode() for k, _ in query.header_equals]
        text += [v.encode() for _, v in query.header_equals]
        text += [n.encode() for n in query.header_exists]
        text += [k.encode() for k in (query.routing_key, query.routing_key_prefix) if k]
        if needle is not None and query.body_is_text and not query.ignore_case:
            text.append(needle)
        self.text_literals = tuple(text)
        # a binary body is stored raw: a byte needle is in the blob whatever else it holds
        self.raw_literal = needle if needle is not None and not query.body_is_text and not query.ignore_case else None
        self.ascii_fold = (needle is not None and query.ignore_case and needle.isascii())
        self.decodes = any(x is not None for x in (query.body_contains, query.body_regex, query.routing_key,
                                                   query.routing_key_prefix)) or bool(
            query.header_equals or query.header_exists or query.json_path)

    def prefilter(self, data: bytes) -> bool:
        """False when the blob cannot match: no decoding needed to know."""
        if self.raw_literal is not None and self.raw_literal not in data:
            return False
        if data[:1] == bytes((FORMAT1,)) or b"\\" in data:
            return True
        for literal in self.text_literals:
            if literal not in data:
                return False
        if self.ascii_fold and data.isascii():
            assert self.needle is not None
            return self.needle in data.lower()
        return True

    def matches(self, message: StoredMessage, read_key: Callable[[int], tuple[bytes, int]]) -> bool:
        _, position, _, _, tag_bytes, data = message
        q = self.query
        if self.position is not None and position != self.position:
            return False
        if q.tag is not None or q.tag_prefix is not None:
            tag = tag_bytes.decode(errors="replace")
            if (q.tag is not None and tag != q.tag) or (q.tag_prefix is not None and not tag.startswith(q.tag_prefix)):
                return False
        if not self.prefilter(data):
            return False
        if self.decodes and not self._fields_match(decode_data(data)):
            return False
        if q.idempotency_key is not None:
            key, flags = read_key(position)
            return bare_key(key, flags) == q.idempotency_key
        return True

    def _fields_match(self, fields: dict[str, Any]) -> bool:
        q = self.query
        key = fields["routing_key"]
        if q.routing_key is not None and key != q.routing_key:
            return False
        if q.routing_key_prefix is not None and not key.startswith(q.routing_key_prefix):
            return False
        headers: dict[str, str] = fields["headers"] or {}
        if any(headers.get(k) != v for k, v in q.header_equals) or any(n not in headers for n in q.header_exists):
            return False
        text: str | None = fields.get("body")
        if self.json_tests:
            if text is None or text.lstrip()[:1] not in ("{", "["):
                return False
            try:
                document = orjson.loads(text)
            except orjson.JSONDecodeError:
                return False
            if not all(t.matches(document) for t in self.json_tests):
                return False
        if q.body_contains is None and self.regex is None:
            return True
        body = text.encode() if text is not None else base64.b64decode(fields["body_base64"])
        if q.body_contains is not None:
            assert self.needle is not None
            if not q.ignore_case:
                if q.body_contains not in body:
                    return False
            elif q.body_is_text:
                source = text if text is not None else body.decode(errors="replace")
                if q.body_contains.decode().lower() not in source.lower():
                    return False
            elif self.needle not in body.lower():
                return False
        if self.regex is not None:
            source = text if text is not None else body.decode(errors="replace")
            if self.regex.search(source) is None:
                return False
        return True


def bare_key(key: bytes, flags: int) -> str:
    """A record's idempotency key as its producer gave it: without the scope (app/broker/dedup.py)."""
    text = key.decode(errors="replace")
    if flags & FLAG_SCOPED_KEY:
        parts = text.split("/", 2)
        return parts[2] if len(parts) == 3 else text
    return text


# ---------------------------------------------------------------------- the scan


def _range(broker: QueuesSource, queue_id: int, query: Query) -> tuple[int, int]:
    """[start, end) of the offsets to scan: the request's range within what the queue holds now."""
    store = broker.store
    start = max(query.from_offset or 0, store.first_offset(queue_id))
    end = min(store.next_offset(queue_id), MAX_INT if query.to_offset is None else query.to_offset)
    if query.from_timestamp is not None:
        start = max(start, store.offset_for_timestamp(queue_id, query.from_timestamp))
    if query.to_timestamp is not None:
        end = min(end, store.offset_for_timestamp(queue_id, query.to_timestamp))
    if query.message_id is not None:  # a direct lookup: the record names its offset in each queue
        try:
            record = store.read_at(int(query.message_id, 16))
        except KeyError:
            return start, start
        at = next((o for q, o in record.placements if q == queue_id), None)
        if at is None or not start <= at < end:
            return end, end
        return at, at + 1
    return start, max(start, end)


async def search(broker: QueuesSource, queue_id: int, query: Query) -> SearchResult:
    """One page of `query` over queue `queue_id` (the caller checked that it exists and may be read)."""
    store = broker.store
    began = time.perf_counter()
    deadline = began + query.max_ms / 1000
    start, end = _range(broker, queue_id, query)  # the cursor keeps this end: a busy queue's search ends
    matcher = Matcher(query)
    tags = frozenset((tag_hash(query.tag.encode()),)) if query.tag is not None else None

    def read_key(position: int) -> tuple[bytes, int]:
        try:
            record = store.read_at(position)
        except KeyError:
            return b"", 0
        return record.idempotency_key, record.flags

    found: list[StoredMessage] = []
    at, scanned, stopped = start, 0, "end"
    while True:
        if at >= end:
            stopped = "end"
            break
        if len(found) >= query.limit:
            stopped = "limit"
            break
        if scanned >= query.max_scan:
            stopped = "max_scan"
            break
        if scanned and time.perf_counter() >= deadline:
            stopped = "max_ms"
            break
        want = min(SLICE, end - at, query.max_scan - scanned)
        if tags is not None:
            batch, after = store.read_matching(queue_id, at, want, tags, max_scan=want)
        else:
            batch = store.read(queue_id, at, want)
            after = batch[-1][0] + 1 if batch else at + want
        for message in batch:
            if message[0] >= end:
                after = end
                break
            if matcher.matches(message, read_key):
                found.append(message)
                if len(found) >= query.limit:
                    after = message[0] + 1
                    break
        after = min(max(after, at + 1), end)
        scanned += after - at
        at = after
        await asyncio.sleep(0)  # let the broker's other clients in between two slices
    cursor = make_cursor(query, at, end) if stopped != "end" else None
    elapsed = (time.perf_counter() - began) * 1000
    return SearchResult(queue_id, found, scanned, round(elapsed, 3), at, cursor, stopped)


def render_page(result: SearchResult, queue_json: bytes) -> bytes:
    """The API's answer: the messages as browse renders them, and how the scan went."""
    parts = render_all(queue_json, ((m, 0) for m in result.found))
    tail = orjson.dumps({"scanned": result.scanned, "elapsed_ms": result.elapsed_ms,
                         "next_offset": result.next_offset, "cursor": result.cursor, "stopped": result.stopped})
    return b'{"messages":[%b],%b' % (b",".join(parts), tail[1:])
