"""Typed results of the client: plain dataclasses built from the API's JSON.

Every model keeps the full JSON object in `raw`, so fields the server adds later are not lost.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

_NO_JSON: Any = object()  # OutgoingMessage(json=None) is the JSON value null


@dataclass(slots=True)
class OutgoingMessage:
    """A message to publish with more than a body: its own routing key, headers, a tag, an
    idempotency key, a time to live (`ttl_ms`). A `str` body is sent as text, `bytes` as base64 (and
    comes back as bytes); `json=value` instead of a body sends the value as JSON text (read it back
    with Message.json()). Without a routing key it takes the one given to the publish call."""

    body: str | bytes = ""
    routing_key: str | None = None
    headers: dict[str, str] | None = None
    tag: str | None = None
    idempotency_key: str | None = None
    json: Any = field(default=_NO_JSON, repr=False)
    ttl_ms: int | None = None  # the message expires this long after publish
    delay_ms: int | None = None  # delivered this much later (up to 7 days); or:
    deliver_at_ms: int | None = None  # delivered at this epoch ms

    def __post_init__(self) -> None:
        if self.json is not _NO_JSON:
            if self.body != "":
                raise ValueError("give a body or json, not both")
            self.body = json_text(self.json)

    def to_json(self, routing_key: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"routing_key": self.routing_key if self.routing_key is not None else routing_key}
        if isinstance(self.body, str):
            out["body"] = self.body
        else:
            out["body_base64"] = base64.b64encode(self.body).decode()
        if self.headers:
            out["headers"] = self.headers
        if self.tag is not None:
            out["tag"] = self.tag
        if self.idempotency_key is not None:
            out["idempotency_key"] = self.idempotency_key
        if self.ttl_ms is not None:
            out["ttl_ms"] = self.ttl_ms
        if self.delay_ms is not None:
            out["delay_ms"] = self.delay_ms
        if self.deliver_at_ms is not None:
            out["deliver_at_ms"] = self.deliver_at_ms
        return out


def json_text(value: Any) -> str:
    """A JSON body: compact UTF-8 text; a value JSON cannot hold is a TypeError, raised before anything is sent."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"cannot publish as JSON: {exc}") from None


class Message(NamedTuple):
    """A delivered message (API.md "Messages as delivered"). `body` is a str for text messages and
    bytes for binary ones; `data` is always bytes. A named tuple: a pull of 1,000 messages builds
    them from its columns in one C loop, about a fifth of what as many dataclass objects cost."""

    queue: str
    offset: int
    id: str
    timestamp: int
    routing_key: str
    exchange: str
    headers: dict[str, str]
    tag: str | None
    body: str | bytes
    delivery_count: int

    @property
    def data(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body

    def json(self) -> Any:
        """The body parsed as JSON (what `publish(..., json=value)` sent); ValueError if it is not JSON."""
        return orjson.loads(self.body)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Message:
        body = d.get("body")
        if body is None:
            body = base64.b64decode(d.get("body_base64") or "")
        return cls(d["queue"], d["offset"], d["id"], d["timestamp"], d.get("routing_key", ""),
                   d.get("exchange", ""), d.get("headers") or {}, d.get("tag"), body, d.get("delivery_count", 0))


class PulledBatch:
    """The messages of one binary pull as columns (`pull_batch`): a list per field, row i of each
    being message i, instead of a Message object per message (which costs a client more than the
    server spends delivering it). `ids` and `headers` are decoded on first use; `messages()` gives
    the Message objects `pull` returns."""

    __slots__ = ("_build_headers", "_build_ids", "_headers", "_ids", "bodies", "delivery_counts", "exchanges",
                 "offsets", "queue", "routing_keys", "tags", "timestamps")

    def __init__(self, queue: str, offsets: list[int], ids: Callable[[], list[str]], timestamps: list[int],
                 routing_keys: list[str], exchanges: list[str], headers: Callable[[], list[dict[str, str]]],
                 tags: list[str | None], bodies: list[str | bytes], delivery_counts: list[int]) -> None:
        self.queue = queue
        self.offsets = offsets
        self.timestamps = timestamps
        self.routing_keys = routing_keys
        self.exchanges = exchanges
        self.tags = tags
        self.bodies = bodies  # str for text messages, bytes for binary ones
        self.delivery_counts = delivery_counts
        self._build_ids, self._build_headers = ids, headers
        self._ids: list[str] | None = None
        self._headers: list[dict[str, str]] | None = None

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = self._build_ids()
        return self._ids

    @property
    def headers(self) -> list[dict[str, str]]:
        if self._headers is None:
            self._headers = self._build_headers()
        return self._headers

    @property
    def next_offset(self) -> int | None:
        """The offset after the last message (what `ack_up_to` takes to acknowledge them all), or
        None for an empty batch."""
        return self.offsets[-1] + 1 if self.offsets else None

    def __len__(self) -> int:
        return len(self.offsets)

    def messages(self) -> list[Message]:
        rows = zip(itertools.repeat(self.queue, len(self.offsets)), self.offsets, self.ids, self.timestamps,
                   self.routing_keys, self.exchanges, self.headers, self.tags, self.bodies, self.delivery_counts,
                   strict=True)
        return list(map(tuple.__new__, itertools.repeat(Message), rows))  # type: ignore[arg-type]


@dataclass(slots=True)
class Placement:
    queue: str
    offset: int | None  # None: a delayed message, which takes its offset when due


@dataclass(slots=True)
class PublishResult:
    """Where one published message went; `duplicate` when its idempotency key was seen before."""

    id: str
    routed: list[Placement]
    duplicate: bool
    deliver_at_ms: int | None = None  # a delayed message's due time

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PublishResult:
        return cls(d["id"], [Placement(p["queue"], p["offset"]) for p in d["routed"]], d["duplicate"],
                   d.get("deliver_at_ms"))


class Published:
    """The answer to a batch publish: one result per message, in order, and the durability applied.
    `results` are built on first use: the answer to a large batch is often only checked, and a
    thousand result objects cost the client more than the publish itself."""

    __slots__ = ("_build", "_count", "_results", "durability")

    def __init__(self, results: list[PublishResult] | None, durability: str,
                 build: Callable[[], list[PublishResult]] | None = None, count: int = 0) -> None:
        """`results`, or `build` (which makes them on first use) and their `count`."""
        self._results = results
        self._build = build
        self._count = count
        self.durability = durability

    @property
    def results(self) -> list[PublishResult]:
        if self._results is None:
            self._results = self._build() if self._build is not None else []
        return self._results

    def __len__(self) -> int:
        return self._count if self._results is None else len(self._results)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Published) and (self.results, self.durability) == (other.results, other.durability)

    def __repr__(self) -> str:
        return f"Published(results={self.results!r}, durability={self.durability!r})"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Published:
        raw = d["results"]
        return cls(None, d["durability"], lambda: [PublishResult.from_json(r) for r in raw], len(raw))


@dataclass(slots=True)
class ExchangeInfo:
    name: str
    type: str
    alternate_exchange: str | None
    messages_in: int
    messages_unroutable: int
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExchangeInfo:
        return cls(d["name"], d["type"], d.get("alternate_exchange"), d.get("messages_in", 0),
                   d.get("messages_unroutable", 0), d)


@dataclass(slots=True)
class GroupInfo:
    name: str
    ack_floor: int
    next_offset: int
    lag: int
    in_flight: int
    consumers: list[str]
    tag_filter: list[str] | None
    raw: dict[str, Any] = field(repr=False)
    paused: bool = False
    paused_until_ms: int | None = None  # epoch ms a timed pause ends
    single_active_consumer: bool = False
    active_consumer: str | None = None  # with single_active_consumer: the consumer receiving

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GroupInfo:
        return cls(d["name"], d["ack_floor"], d["next_offset"], d["lag"], d["in_flight"],
                   [c["id"] for c in d.get("consumers", [])], d.get("tag_filter"), d,
                   d.get("paused", False), d.get("paused_until_ms"), d.get("single_active_consumer", False),
                   d.get("active_consumer"))


@dataclass(slots=True)
class QueueInfo:
    name: str
    first_offset: int
    next_offset: int
    messages: int
    bytes: int
    producer_visible: bool
    consumer_visible: bool
    groups: list[GroupInfo]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueInfo:
        return cls(d["name"], d["first_offset"], d["next_offset"], d["messages"], d["bytes"],
                   d["producer_visible"], d["consumer_visible"],
                   [GroupInfo.from_json(g) for g in d.get("groups", [])], d)


@dataclass(slots=True)
class BindingInfo:
    id: int
    exchange: str
    queue: str
    routing_key: str
    arguments: dict[str, str]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BindingInfo:
        return cls(d["id"], d["exchange"], d["queue"], d["routing_key"], d.get("arguments") or {})


@dataclass(slots=True)
class Page:
    """A page of a browse: the messages and the offset to continue from."""

    messages: list[Message]
    next_offset: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Page:
        return cls([Message.from_json(m) for m in d["messages"]], d["next_offset"])


@dataclass(slots=True)
class AckResult:
    ack_floor: int
    acked: int
    not_in_flight: list[int]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AckResult:
        return cls(d["ack_floor"], d.get("acked", 0), d.get("not_in_flight", []))


@dataclass(slots=True)
class NackResult:
    """`exhausted`: messages past the queue's max_deliveries (or rejected with requeue=False), which
    went to its dead-letter exchange, or without one were dropped."""

    ack_floor: int
    nacked: int
    not_in_flight: list[int]
    exhausted: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NackResult:
        return cls(d["ack_floor"], d.get("nacked", 0), d.get("not_in_flight", []), d.get("exhausted", 0))
