"""The read model: typed, frozen views of the broker for the JSON API, the console and the alerts.

Every view is built by a function here that only reads broker state (no pruning, no I/O beyond the
storage engine's in-memory offsets and one index/record read for the oldest unacked timestamp; the
access views read the database in a worker thread). The functions take a `Source`, the Protocol of
what they read (app/broker/sources.py), never the Broker class. A server's first stage does not load
this module (app/start.py): its 21 dataclasses are about a tenth of that stage's imports.

The JSON API renders a view with `dumps(view)`: its JSON is its fields (see "JSON" below), and
app/api/schemas.py derives the OpenAPI response schemas from the same fields. The console renders
the same objects in its templates; the alert rules evaluate them. Publish, pull and the API's browse
do not go through views: they keep their pre-rendered bytes for speed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chunkmq import __version__
from chunkmq.broker import search as searching
from chunkmq.broker.clearing import CLEAR
from chunkmq.broker.clearing import STATES as CLEARING_STATES
from chunkmq.broker.clearing import State as ClearingState
from chunkmq.broker.errors import NotFound
from chunkmq.broker.expiry import expires_at
from chunkmq.broker.group import CONSUMER_FORGET_MS, Group, monotonic_ms, now_ms
from chunkmq.broker.message import decode_data
from chunkmq.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS
from chunkmq.broker.queue import Queue, QueueSettings
from chunkmq.broker.routing import Binding, Exchange
from chunkmq.broker.sources import Source, StoreSource
from chunkmq.broker.view_json import as_json as as_json
from chunkmq.broker.view_json import dumps as dumps
from chunkmq.broker.view_json import to_json as to_json
from chunkmq.meta.rows import TokenRow, UserRow
from chunkmq.storage import StoredMessage
from chunkmq.wire import codes

_INTERNAL = {"internal": True}  # field metadata: read by the console, the history or the alerts, not in the JSON


def _doc(text: str, **schema: Any) -> dict[str, Any]:
    """Field metadata: the field's description (and JSON schema keywords) in the API's OpenAPI document."""
    return {"schema": {"description": text, **schema}}


@dataclass(frozen=True, slots=True)
class ConsumerView:
    id: str
    last_seen: int = field(metadata=_doc("epoch ms"))


@dataclass(frozen=True, slots=True)
class GroupView:
    queue: str = field(metadata=_INTERNAL)
    name: str
    ack_floor: int = field(metadata=_doc("every offset below it is done"))
    next_offset: int = field(metadata=_doc("the next offset to deliver for the first time"))
    lag: int = field(metadata=_doc("messages not yet finished (respecting the tag filter)"))
    lag_seconds: float = field(metadata=_doc("age of the oldest unacked message, 0 without lag"))
    oldest_unacked_age_ms: int  # lag_seconds in ms
    in_flight: int
    pending_redelivery: int
    consumers: tuple[ConsumerView, ...]
    tag_filter: tuple[str, ...] | None = field(metadata=_doc("tags the group receives; null: every message"))
    missed: int = field(
        metadata=_doc("messages removed (retention, limits, disk budget) before this group consumed them"))
    behind_retention: bool
    acked: int = field(metadata=_INTERNAL)  # messages acknowledged since the broker started
    paused: bool = field(default=False, metadata=_doc("delivers nothing until resumed or paused_until_ms"))
    paused_until_ms: int | None = field(default=None, metadata=_doc("epoch ms a timed pause ends; null: none"))
    single_active_consumer: bool = field(
        default=False, metadata=_doc("one attached consumer at a time receives the messages"))
    active_consumer: str | None = field(
        default=None, metadata=_doc("the consumer receiving, with single_active_consumer; null: none"))
    # Where the lag is heading (app/broker/clearing.py), as of the group's newest history sample.
    clearing: ClearingState = field(default="unknown", metadata=_doc(
        "clear, clearing, growing, steady (the lag has not moved) or unknown (not sampled yet)",
        enum=list(CLEARING_STATES)))
    lag_trend: float = field(default=0.0, metadata=_doc(
        "the lag's change per second over the last 5 minutes (negative: falling)"))
    time_to_clear_seconds: float | None = field(default=None, metadata=_doc(
        "seconds until the lag is gone at the rate it fell over the last 5 minutes; null unless clearing"))
    expired: int = field(default=0, metadata=_doc(
        "messages this group passed as expired, since the broker started (dead-lettered with a dead-letter exchange)"))


@dataclass(frozen=True, slots=True)
class InFlightView:
    """One message a group delivered and has not had acknowledged."""

    offset: int
    id: str | None = field(metadata=_doc("the message id; null when retention removed the message"))
    consumer: str = field(metadata=_doc("the consumer it was delivered to"))
    delivery_count: int = field(metadata=_doc("deliveries so far, this one included"))
    deadline: int = field(metadata=_doc("epoch ms: redelivered after it unless acked (the ack timeout)"))


@dataclass(frozen=True, slots=True)
class InFlightPageView:
    """The messages in flight of a group now, in offset order: one page of them."""

    queue: str = field(metadata=_INTERNAL)
    group: str = field(metadata=_INTERNAL)
    in_flight: int = field(metadata=_doc("messages in flight in all"))
    messages: tuple[InFlightView, ...]
    next_after: int | None = field(metadata=_doc("`after` for the next page; null: this is the last"))


@dataclass(frozen=True, slots=True)
class QueueView:
    name: str
    id: int
    first_offset: int
    next_offset: int
    messages: int
    bytes: int
    producer_visible: bool
    consumer_visible: bool
    messages_in: int
    messages_dropped: int
    dead_lettered: int = field(metadata=_doc("since the broker started"))
    expired: int = field(metadata=_doc("messages its groups passed as expired, since the broker started"))
    settings: dict[str, Any] = field(metadata={"flatten": QueueSettings})  # QueueSettings.as_dict(), inline in the JSON
    delivered: int = field(metadata=_INTERNAL)  # deliveries since the broker started, redeliveries included
    scheduled: int = field(metadata=_doc("delayed messages not due yet (they have no offset until due)"))
    next_due_ms: int | None = field(metadata=_doc("epoch ms the nearest delayed message is due; null: none"))
    groups: tuple[GroupView, ...]

    @property
    def worst_group(self) -> GroupView | None:
        """The group with the most lag (ties: the oldest unacked message)."""
        return max(self.groups, key=lambda g: (g.lag, g.lag_seconds), default=None)


@dataclass(frozen=True, slots=True)
class ExchangeView:
    name: str = field(metadata=_doc("amq.default for the default exchange"))
    type: str = field(metadata=_doc("direct, fanout, topic, headers or hash",
                                    enum=["direct", "fanout", "topic", "headers", "hash"]))
    alternate_exchange: str | None
    messages_in: int
    messages_unroutable: int
    bindings: int


@dataclass(frozen=True, slots=True)
class ChunkView:
    number: int
    state: str = field(metadata=_doc("active: the chunk appends go to; sealed: full, read only",
                                     enum=["active", "sealed"]))
    file: str = field(metadata=_doc("relative to the data directory"))
    data_bytes: int
    records: int
    reads_cache: int
    reads_disk: int
    writes: int
    created_ms: int
    first_timestamp: int
    live_bytes: int = field(
        metadata=_doc("bytes of records some queue still needs (an upper bound for fanned-out records)"))
    live_share: float = field(metadata=_doc(
        "live_bytes / CHUNKMQ_CHUNK_SIZE: below CHUNKMQ_GC_THRESHOLD the collector rewrites the chunk",
        minimum=0, maximum=1))
    file_bytes: int = field(metadata=_doc("what the file takes on disk"))
    rewritten: bool = field(metadata=_doc("written by the storage collector"))
    last: int = field(
        metadata=_doc("the highest chunk number whose records the file holds (number, unless chunks were merged)"))


@dataclass(frozen=True, slots=True)
class IndexView:
    """A queue's index files (one 24-byte entry per offset, preallocated per file)."""

    queue: str
    files: int
    bytes: int  # on disk (sparse files count what they hold)
    entries_per_file: int
    first_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class Totals:
    exchanges: int
    queues: int
    groups: int
    messages: int
    bytes: int
    disk_used_bytes: int
    disk_free_bytes: int
    disk_budget_bytes: int


@dataclass(frozen=True, slots=True)
class Rates:
    """Messages per second, over the last few seconds."""

    publish: float
    deliver: float
    ack: float


@dataclass(frozen=True, slots=True)
class Counters:
    """Message counters since the broker started."""

    published: int
    delivered: int
    acked: int
    dead_lettered: int
    dropped: int
    expired: int = 0


@dataclass(frozen=True, slots=True)
class Retention:
    """What retention (limits, age, the disk budget) deleted since the broker started."""

    freed_bytes: int
    deleted_chunks: int


@dataclass(frozen=True, slots=True)
class Overview:
    version: str
    uptime_seconds: float
    durability: str = field(metadata=_doc("when a publish is on disk: fsync (before the answer), interval, none",
                           enum=["fsync", "interval", "none"]))
    totals: Totals
    rates: Rates
    counters: Counters
    retention: Retention


@dataclass(frozen=True, slots=True)
class BindingView:
    id: int
    exchange: str
    queue: str
    routing_key: str
    arguments: dict[str, str]  # headers exchanges: x-match and the headers to match


@dataclass(frozen=True, slots=True)
class MessageView:
    """A message as browsed (no group): API.md's fields, `body` for text or `body_base64` for bytes."""

    queue: str
    offset: int
    id: str
    timestamp: int  # epoch ms
    exchange: str
    routing_key: str
    headers: dict[str, str]
    tag: str | None
    body: str | None
    body_base64: str | None
    expires_at: int | None = None  # epoch ms (its own ttl_ms or the queue's message_ttl_seconds); None: never
    expired: bool = False  # expired now: a group that reaches it passes it


@dataclass(frozen=True, slots=True)
class BrowseView:
    messages: tuple[MessageView, ...]
    next_offset: int  # where the next page starts


@dataclass(frozen=True, slots=True)
class SearchView:
    """One page of a search (app/broker/search.py) for the console: what it found and how the scan went."""

    messages: tuple[MessageView, ...]
    scanned: int
    elapsed_ms: float
    next_offset: int  # where the scan stopped
    cursor: str | None  # None: the range is done
    stopped: str  # limit, max_scan, max_ms or end


@dataclass(frozen=True, slots=True)
class GroupGauge:
    name: str
    lag: int
    missed: int


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """A queue's numbers for a metrics scrape: in memory only, no record read (unlike QueueView)."""

    name: str
    messages: int
    bytes: int
    messages_dropped: int
    groups: tuple[GroupGauge, ...]
    expired: int = 0
    scheduled: int = 0  # delayed messages not due yet


@dataclass(frozen=True, slots=True)
class StorageView:
    disk_bytes: int  # what the store's files take
    data_dir_bytes: int  # a conservative estimate of everything under the data directory (the budget's measure)
    refused_by_budget: int  # publishes refused by the disk budget since start
    refusal: str | None  # why publishes are refused for lack of space now, or None


@dataclass(frozen=True, slots=True)
class TierView:
    """Tiered storage (app/broker/tier.py), as its last round left it."""

    lag_bytes: int  # sealed local chunk bytes not verified in the bucket yet
    bucket_bytes: int  # bytes of the objects the manifest holds
    uploaded_bytes: int  # uploaded since start
    fetches: int  # chunks fetched back from the bucket since start
    evictions: int  # chunks evicted from the local disk since start
    failures: int  # failed upload rounds in a row (0: the last one succeeded)
    last_error: str


@dataclass(frozen=True, slots=True)
class AccessView:
    """API tokens and console users, without their hashes."""

    tokens: tuple[TokenRow, ...]
    users: tuple[UserRow, ...]


def group_view(broker: StoreSource, queue: Queue, group: Group, now: int | None = None) -> GroupView:
    store = broker.store
    now = now_ms() if now is None else now
    floor = group.ack_floor
    end = store.next_offset(queue.id)
    lag = group.lag_in(store)
    # no lag is clear at once (the estimate is as of the newest sample, which may be older)
    clearing = broker.history.clearing(queue.id, group.name) if lag else CLEAR
    oldest = store.timestamp_of(queue.id, floor) if floor < end else None
    lag_seconds = max(0, now - oldest) / 1000 if oldest is not None else 0.0
    return GroupView(
        queue=queue.name,
        name=group.name,
        ack_floor=floor,
        next_offset=group.next_offset,
        lag=lag,
        lag_seconds=lag_seconds,
        oldest_unacked_age_ms=round(lag_seconds * 1000),
        in_flight=len(group.in_flight),
        pending_redelivery=len(group.pending),
        consumers=tuple(
            ConsumerView(c, seen) for c, seen in group.consumers.items() if now - seen <= CONSUMER_FORGET_MS
        ),
        tag_filter=group.tag_filter,
        missed=group.missed,
        behind_retention=floor < store.first_offset(queue.id),
        acked=group.acked,
        paused=(paused := group.paused and (group.paused_until_ms is None or group.paused_until_ms > now)),
        paused_until_ms=group.paused_until_ms if paused else None,
        single_active_consumer=group.single_active_consumer,
        active_consumer=group.attached.active if group.single_active_consumer else None,
        clearing=clearing.state,
        lag_trend=clearing.lag_trend,
        time_to_clear_seconds=clearing.seconds,
        expired=group.expired,
    )


def in_flight(broker: Source, queue_name: str, group_name: str, after: int = -1, limit: int = 100,
              now: int | None = None) -> InFlightPageView:
    """Group `group_name`'s messages in flight after offset `after`, the first `limit` of them by offset."""
    queue = _queue(broker, queue_name)
    group = queue.groups.get(group_name)
    if group is None:
        raise NotFound(f"group {group_name!r} not found on queue {queue_name!r}", code=codes.GROUP_NOT_FOUND)
    entries = group.in_flight
    offsets = heapq.nsmallest(limit + 1, (o for o in entries if o > after))
    now = now_ms() if now is None else now
    to_wall = now - monotonic_ms()  # deadlines are monotonic ms
    store = broker.store
    out = []
    for offset in offsets[:limit]:
        entry = entries[offset]
        index = store.index_entries(queue.id, offset, 1) if offset >= store.first_offset(queue.id) else []
        position = index[0].position if index and index[0].position >= 0 else None
        out.append(InFlightView(offset, f"{position:016x}" if position is not None else None, entry.consumer,
                                entry.count, entry.deadline + to_wall))
    next_after = offsets[limit - 1] if len(offsets) > limit else None
    return InFlightPageView(queue.name, group.name, len(entries), tuple(out), next_after)


def queue_view(broker: StoreSource, queue: Queue, now: int | None = None) -> QueueView:
    store = broker.store
    first, end = store.first_offset(queue.id), store.next_offset(queue.id)
    now = now_ms() if now is None else now
    return QueueView(
        name=queue.name,
        id=queue.id,
        first_offset=first,
        next_offset=end,
        messages=end - first,
        bytes=store.queue_bytes(queue.id),
        producer_visible=queue.producer_visible,
        consumer_visible=queue.consumer_visible,
        messages_in=queue.messages_in,
        messages_dropped=queue.messages_dropped,
        dead_lettered=queue.dead_lettered,
        expired=queue.expired,
        settings=queue.settings.as_dict(),
        delivered=queue.delivered,
        scheduled=(scheduled := _scheduled(broker, queue))[0],
        next_due_ms=scheduled[1],
        groups=tuple(group_view(broker, queue, g, now) for g in list(queue.groups.values())),
    )


def _scheduled(broker: StoreSource, queue: Queue) -> tuple[int, int | None]:
    """(delayed messages not due yet, the nearest due time) of a queue (app/broker/scheduling.py)."""
    schedule = getattr(broker, "schedule", None)
    return (0, None) if schedule is None else schedule.scheduled(queue.id)  # type: ignore[no-any-return]


def queue_views(broker: Source) -> list[QueueView]:
    now = now_ms()
    return [queue_view(broker, q, now) for q in sorted(broker.queues.values(), key=lambda q: q.name)]


def queue_sort_key(broker: Source, sort: str, now: int | None = None) -> Callable[[str], Any]:
    """The console's sort of the queues list by `sort` (messages, bytes, rate or lag), as a key of a
    queue's name read straight from the broker: no view is built for the queues off the page. `lag`
    orders as the views' worst group does, (lag, lag_seconds), with -1 for a queue without groups."""
    store = broker.store
    queues = broker.queues
    now = now_ms() if now is None else now

    def worst(name: str) -> tuple[int, int]:
        queue = queues[name]
        end = store.next_offset(queue.id)
        out = (-1, 0)
        for group in list(queue.groups.values()):
            floor = group.ack_floor
            age = max(0, now - store.timestamp_of(queue.id, floor)) if floor < end else 0
            out = max(out, (group.lag_in(store), age))
        return out

    keys: dict[str, Callable[[str], Any]] = {
        "messages": lambda n: store.next_offset(queues[n].id) - store.first_offset(queues[n].id),
        "bytes": lambda n: store.queue_bytes(queues[n].id),
        "rate": lambda n: queues[n].messages_in,
        "lag": worst,
    }
    return keys[sort]


def queue_page(broker: Source, after: str | None, limit: int,
               shown: Callable[[str], bool] = lambda _: True) -> tuple[list[QueueView], str | None]:
    """Up to `limit` queues whose names sort after `after` (from the first without it) and that
    `shown` lets through, in name order, and the cursor of the next page (None: this is the last).
    Views are built for this page alone: the names are kept sorted, and found with a binary search."""
    names = broker.sorted_queue_names()
    start = 0 if after is None else bisect_right(names, after)
    found: list[str] = []
    for name in itertools.islice(names, start, None):
        if shown(name):
            if len(found) == limit:  # one more is shown: there is a next page
                now = now_ms()
                return [queue_view(broker, broker.queues[n], now) for n in found], found[-1]
            found.append(name)
    now = now_ms()
    return [queue_view(broker, broker.queues[n], now) for n in found], None


def lagging_groups(broker: Source, n: int) -> list[GroupView]:
    """The `n` groups with the most lag (ties: the oldest unacked message first), lag > 0 only.
    The groups with lag are kept up to date as queues change (resting.LaggingGroups), and a view is
    built for those `n` alone: among equal lags the older oldest unacked message is the one lower in
    the log (timestamps never decrease along it), an index entry away."""
    store = broker.store
    lagging = broker.lagging.candidates()

    def oldest_first(item: tuple[int, Queue, Group]) -> tuple[int, int]:
        lag, q, g = item
        entry = store.index_entries(q.id, g.ack_floor, 1)
        return lag, -(entry[0].position if entry else 0)

    now = now_ms()
    top = heapq.nlargest(n, lagging, key=oldest_first) if len(lagging) > n else lagging
    found = (group_view(broker, q, g, now) for _, q, g in top)
    return sorted(found, key=lambda v: (v.lag, v.lag_seconds), reverse=True)


def exchange_view(exchange: Exchange) -> ExchangeView:
    return ExchangeView(
        name=exchange.name or DEFAULT_EXCHANGE_ALIAS,
        type=exchange.type.value,
        alternate_exchange=exchange.alternate_exchange,
        messages_in=exchange.messages_in,
        messages_unroutable=exchange.messages_unroutable,
        bindings=len(exchange.bindings),
    )


def exchange_views(broker: Source) -> list[ExchangeView]:
    return [exchange_view(e) for e in sorted(broker.routing.exchanges.values(), key=lambda e: e.name)]


def chunk_views(broker: Source) -> list[ChunkView]:
    data_dir = broker.settings.data_dir.resolve()
    size = broker.settings.chunk_size
    out = []
    for c in broker.store.chunks():
        try:
            file = str(c.path.resolve().relative_to(data_dir))
        except ValueError:  # a store outside the data directory: its name alone
            file = c.path.name
        out.append(ChunkView(c.number, c.state, file, c.data_bytes, c.records, c.reads_cache, c.reads_disk,
                             c.writes, c.created_ms, c.first_timestamp, c.live_bytes,
                             round(c.live_bytes / size, 4), c.file_bytes, c.rewritten, c.last))
    return out


def index_views(broker: Source) -> list[IndexView]:
    """Per queue, its index files: stats the files, so call it off the event loop."""
    store = broker.store
    out = []
    for q in sorted(list(broker.queues.values()), key=lambda q: q.name):
        try:
            paths = store.index_files(q.id)
            size = sum(p.stat().st_blocks * 512 for p in paths if p.exists())
        except (KeyError, FileNotFoundError):  # deleted meanwhile
            continue
        out.append(IndexView(q.name, len(paths), size, broker.settings.index_chunk_entries,
                             store.first_offset(q.id), store.next_offset(q.id)))
    return out


def overview(broker: Source) -> Overview:
    store = broker.store
    stats = broker.stats
    queues = list(broker.queues.values())
    disk = shutil.disk_usage(broker.settings.data_dir)
    return Overview(
        version=__version__,
        uptime_seconds=round(time.time() - stats.started, 1),
        durability=broker.durability,
        totals=Totals(
            exchanges=len(broker.routing.exchanges),
            queues=len(queues),
            groups=sum(len(q.groups) for q in queues),
            messages=store.held()[0],  # kept up to date per changed queue, not summed over every queue
            bytes=store.held()[1],
            disk_used_bytes=store.disk_bytes(),
            disk_free_bytes=disk.free,
            disk_budget_bytes=broker.settings.disk_budget_bytes,
        ),
        rates=Rates(round(stats.published.per_second, 1), round(stats.delivered.per_second, 1),
                    round(stats.acked.per_second, 1)),
        counters=counters(broker),
        retention=Retention(stats.retention_freed_bytes, stats.retention_deleted_chunks),
    )


# ---------------------------------------------------------------------- lookups


def queue_names(broker: Source, contains: str = "") -> list[str]:
    """The queues' names, sorted; with `contains`, those holding it (case-insensitive)."""
    needle = contains.lower()
    names = broker.sorted_queue_names()
    return [n for n in names if needle in n.lower()] if needle else list(names)


def exchange_names(broker: Source) -> list[str]:
    """The exchanges' names as shown (amq.default for the default exchange), sorted."""
    return sorted(e or DEFAULT_EXCHANGE_ALIAS for e in list(broker.routing.exchanges))


def has_queue(broker: Source, name: str) -> bool:
    return name in broker.queues


def _queue(broker: Source, name: str) -> Queue:
    queue = broker.queues.get(name)
    if queue is None:
        raise NotFound(f"queue {name!r} not found", code=codes.QUEUE_NOT_FOUND)
    return queue


def find_queue(broker: Source, name: str, now: int | None = None) -> QueueView:
    """The view of queue `name`; NotFound (queue_not_found) when there is none."""
    return queue_view(broker, _queue(broker, name), now)


def lookup_queue(broker: Source, name: str, now: int | None = None) -> QueueView | None:
    """The view of queue `name`, or None when there is none (deleted meanwhile)."""
    queue = broker.queues.get(name)
    return queue_view(broker, queue, now) if queue is not None else None


def find_group(queue: QueueView, name: str) -> GroupView:
    """Group `name` of the queue's view; NotFound (group_not_found) when it has none of that name."""
    for g in queue.groups:
        if g.name == name:
            return g
    raise NotFound(f"group {name!r} not found on queue {queue.name!r}", code=codes.GROUP_NOT_FOUND)


def find_exchange(broker: Source, name: str) -> ExchangeView:
    """The view of exchange `name` ("" or amq.default: the default exchange); NotFound when there is none."""
    exchange = broker.routing.exchanges.get(DEFAULT_EXCHANGE if name == DEFAULT_EXCHANGE_ALIAS else name)
    if exchange is None:
        raise NotFound(f"exchange {name!r} not found", code=codes.EXCHANGE_NOT_FOUND)
    return exchange_view(exchange)


def oldest_timestamp(broker: Source, queue: QueueView) -> int | None:
    """The timestamp (epoch ms) of the queue's first message, None when it is empty (or gone)."""
    try:
        return broker.store.timestamp_of(queue.id, queue.first_offset)
    except KeyError:  # deleted meanwhile
        return None


# ---------------------------------------------------------------------- bindings


def binding_view(b: Binding) -> BindingView:
    return BindingView(b.id, b.exchange, b.queue, b.routing_key, dict(b.arguments))


def binding_views(broker: Source, exchange: str | None = None, queue: str | None = None) -> list[BindingView]:
    """The bindings, by id; only those of `exchange` and of `queue` when given."""
    found = [
        b
        for ex in list(broker.routing.exchanges.values())
        for b in ex.bindings
        if (exchange is None or b.exchange == exchange) and (queue is None or b.queue == queue)
    ]
    return [binding_view(b) for b in sorted(found, key=lambda b: b.id)]


def find_binding(broker: Source, binding_id: int) -> BindingView:
    for ex in list(broker.routing.exchanges.values()):
        for b in ex.bindings:
            if b.id == binding_id:
                return binding_view(b)
    raise NotFound(f"binding {binding_id} not found", code=codes.BINDING_NOT_FOUND)


# ---------------------------------------------------------------------- browsing (the console)


def browse_start(broker: Source, queue_id: int, offset: int | None, timestamp: int | None) -> int:
    """Where a browse starts: the first message at or after `timestamp`, else `offset`, else the first."""
    if timestamp is not None:
        return broker.store.offset_for_timestamp(queue_id, timestamp)
    return broker.store.first_offset(queue_id) if offset is None else offset


def browse(broker: Source, name: str, offset: int | None, timestamp: int | None, limit: int) -> BrowseView:
    """A page of queue `name` as Broker.browse reads it, as views (the JSON API keeps Broker.browse's bytes)."""
    queue = _queue(broker, name)
    store = broker.store
    start = browse_start(broker, queue.id, offset, timestamp)
    stored = store.read(queue.id, start, limit)
    next_offset = stored[-1][0] + 1 if stored else max(start, store.first_offset(queue.id))
    return BrowseView(tuple(_message_views(queue, stored)), next_offset)


def _message_views(queue: Queue, stored: list[StoredMessage]) -> list[MessageView]:
    messages = []
    ttl, now = queue.settings.message_ttl_ms, now_ms()
    for at, position, timestamp_, flags, tag, data in stored:
        fields = decode_data(data, tag)
        expires = expires_at(timestamp_, flags, data, ttl)
        messages.append(MessageView(
            queue.name, at, f"{position:016x}", timestamp_, fields.get("exchange", ""), fields.get("routing_key", ""),
            fields.get("headers") or {}, fields.get("tag"), fields.get("body"), fields.get("body_base64"),
            expires, expires is not None and expires <= now,
        ))
    return messages


async def search(broker: Source, name: str, body: dict[str, Any]) -> SearchView:
    """A page of a search of queue `name` (`body` as the API takes it; InvalidInput names a bad field)."""
    queue = _queue(broker, name)
    result = await searching.search(broker, queue.id, searching.parse(body))
    return SearchView(tuple(_message_views(queue, result.found)), result.scanned, result.elapsed_ms,
                      result.next_offset, result.cursor, result.stopped)


# ---------------------------------------------------------------------- operations


def queue_gauges(broker: Source) -> list[QueueGauge]:
    store = broker.store
    out = []
    for q in list(broker.queues.values()):
        groups = tuple(GroupGauge(g.name, g.lag_in(store), g.missed) for g in list(q.groups.values()))
        out.append(QueueGauge(q.name, store.next_offset(q.id) - store.first_offset(q.id), store.queue_bytes(q.id),
                              q.messages_dropped, groups, q.expired, _scheduled(broker, q)[0]))
    return out


def storage(broker: Source) -> StorageView:
    guard = broker.disk
    return StorageView(broker.store.disk_bytes(), guard.estimate(), guard.refused, guard.refusal())


def tier(broker: Source) -> TierView | None:
    """None without CHUNKMQ_TIER_URL."""
    t = broker.tier
    if t is None:
        return None
    return TierView(t.lag_bytes, t.bucket_bytes, t.uploaded_total, t.fetched, t.evicted, t.failures, t.last_error)


def refusal(broker: Source) -> str | None:
    """Why publishes are refused (507) for lack of space now, or would be at the next chunk; None: they are not."""
    return broker.disk.refusal()


def counters(broker: Source) -> Counters:
    stats = broker.stats
    return Counters(stats.published.total, stats.delivered.total, stats.acked.total, stats.dead_lettered,
                       stats.dropped, stats.expired)


def uptime_seconds(broker: Source) -> float:
    return time.time() - broker.stats.started


# ---------------------------------------------------------------------- access (SQL: in a worker thread)


async def access(broker: Source) -> AccessView:
    meta = broker.meta
    tokens = await asyncio.to_thread(meta.list_tokens)
    users = await asyncio.to_thread(meta.list_users)
    return AccessView(tuple(tokens), tuple(users))


async def login(broker: Source, name: str, password: str) -> UserRow | None:
    """The console user when `password` is theirs, else None (as slow for an unknown name)."""
    return await asyncio.to_thread(broker.meta.check_password, name, password)


# ---------------------------------------------------------------------- JSON (API.md): app/broker/view_json.py
