"""Exchanges and bindings in memory, and the AMQP routing rules of each exchange type.

The routing table is the broker's copy of what app/meta stores; it is rebuilt from the database at
start and kept in step by every declare/bind/delete. Routing never touches the database.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from chunkmq.broker.names import DEFAULT_EXCHANGE

_TOPIC_CACHE_MAX = 10_000  # routing keys remembered per topic exchange before the cache is reset


class ExchangeType(StrEnum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"
    HASH = "hash"


@dataclass(frozen=True, slots=True)
class Binding:
    id: int
    exchange: str
    queue: str
    routing_key: str
    arguments: Mapping[str, str]


def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic match: `*` is exactly one word, `#` zero or more words (so `a.#` matches `a`)."""
    return _match_words(pattern.split("."), routing_key.split("."))


def _match_words(pattern: list[str], words: list[str]) -> bool:
    # Iterative matcher with backtracking to the last `#`: linear in practice, no regex compilation.
    p = w = 0
    star_p, star_w = -1, 0
    while w < len(words):
        if p < len(pattern) and pattern[p] == "#":
            star_p, star_w = p, w
            p += 1
        elif p < len(pattern) and (pattern[p] == "*" or pattern[p] == words[w]):
            p += 1
            w += 1
        elif star_p >= 0:
            star_w += 1
            p, w = star_p + 1, star_w
        else:
            return False
    while p < len(pattern) and pattern[p] == "#":
        p += 1
    return p == len(pattern)


def headers_match(arguments: Mapping[str, str], headers: Mapping[str, str]) -> bool:
    """Headers exchange: `x-match` `all` (default) or `any`; other `x-` arguments are ignored."""
    wanted = [(k, v) for k, v in arguments.items() if not k.startswith("x-")]
    if arguments.get("x-match", "all") == "any":
        return any(headers.get(k) == v for k, v in wanted)
    return all(headers.get(k) == v for k, v in wanted)


def stable_hash(routing_key: str) -> int:
    """The same key lands in the same queue across restarts (Python's hash() is salted)."""
    return zlib.crc32(routing_key.encode())


@dataclass(slots=True)
class Exchange:
    name: str
    type: ExchangeType
    alternate_exchange: str | None = None
    bindings: list[Binding] = field(default_factory=list)
    messages_in: int = 0
    messages_unroutable: int = 0
    _direct: dict[str, list[str]] = field(default_factory=dict)
    _topic_cache: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def rebuild(self) -> None:
        """Recompute lookup structures after the bindings changed."""
        self._direct = {}
        for b in self.bindings:
            queues = self._direct.setdefault(b.routing_key, [])
            if b.queue not in queues:
                queues.append(b.queue)
        self._topic_cache = {}
        # The hash exchange spreads over its queues in binding order, so the spread is stable.
        self.bindings.sort(key=lambda b: b.id)

    def route(self, routing_key: str, headers: Mapping[str, str]) -> tuple[str, ...] | list[str]:
        """Names of the queues bound to this exchange that receive the message (no duplicates)."""
        kind = self.type
        if kind is ExchangeType.DIRECT:
            return self._direct.get(routing_key, ())
        if kind is ExchangeType.FANOUT:
            return _unique(b.queue for b in self.bindings)
        if kind is ExchangeType.TOPIC:
            cached = self._topic_cache.get(routing_key)
            if cached is None:
                if len(self._topic_cache) >= _TOPIC_CACHE_MAX:
                    self._topic_cache.clear()
                cached = tuple(
                    _unique(b.queue for b in self.bindings if topic_matches(b.routing_key, routing_key))
                )
                self._topic_cache[routing_key] = cached
            return cached
        if kind is ExchangeType.HEADERS:
            return _unique(b.queue for b in self.bindings if headers_match(b.arguments, headers))
        # HASH
        queues = _unique(b.queue for b in self.bindings)
        if not queues:
            return ()
        return (queues[stable_hash(routing_key) % len(queues)],)


def _unique(names: object) -> list[str]:
    return list(dict.fromkeys(names))  # type: ignore[call-overload]


class RoutingTable:
    """Exchanges by name, with the default exchange built in. Resolves alternate exchanges."""

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {DEFAULT_EXCHANGE: Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT)}

    def route(
        self, exchange: Exchange, routing_key: str, headers: Mapping[str, str], queues: Mapping[str, object]
    ) -> list[str] | tuple[str, ...]:
        """Queues for one message; follows alternate exchanges (each at most once) when nothing matched."""
        if exchange.name == DEFAULT_EXCHANGE:
            return (routing_key,) if routing_key in queues else ()
        seen: set[str] = set()
        current: Exchange | None = exchange
        while current is not None and current.name not in seen:
            seen.add(current.name)
            routed = current.route(routing_key, headers)
            if routed:
                return routed
            current = self.exchanges.get(current.alternate_exchange) if current.alternate_exchange else None
        return ()

    def add_binding(self, binding: Binding) -> None:
        exchange = self.exchanges[binding.exchange]
        exchange.bindings.append(binding)
        exchange.rebuild()

    def remove_bindings(self, predicate: object) -> list[Binding]:
        """Drop every binding for which predicate(binding) is true; returns what was removed."""
        removed: list[Binding] = []
        for exchange in self.exchanges.values():
            keep = [b for b in exchange.bindings if not predicate(b)]  # type: ignore[operator]
            if len(keep) != len(exchange.bindings):
                removed.extend(b for b in exchange.bindings if b not in keep)
                exchange.bindings = keep
                exchange.rebuild()
        return removed
