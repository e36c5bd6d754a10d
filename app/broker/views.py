"""The read model: typed, frozen views of the broker for the JSON API, the console and the alerts.

Every view is built by a function here that only reads broker state (no pruning, no I/O beyond the
storage engine's in-memory offsets and one index/record read for the oldest unacked timestamp).
The JSON API renders a view with `as_json(view)`; the console renders the same objects in its
templates; the alert rules evaluate them. Publish, pull and browse do not go through views: they
keep their pre-rendered bytes for speed.
"""

from __future__ import annotations

import dataclasses
import heapq
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chunkmq import __version__
from chunkmq.broker.group import CONSUMER_FORGET_MS, Group
from chunkmq.broker.names import DEFAULT_EXCHANGE_ALIAS
from chunkmq.broker.queue import Queue
from chunkmq.broker.routing import Exchange

if TYPE_CHECKING:
    from chunkmq.broker.broker import Broker


@dataclass(frozen=True, slots=True)
class ConsumerView:
    id: str
    last_seen: int  # epoch ms


@dataclass(frozen=True, slots=True)
class GroupView:
    queue: str
    name: str
    ack_floor: int  # every offset below it is done
    next_offset: int  # next offset to deliver for the first time
    lag: int  # messages not yet finished (respecting the tag filter)
    lag_seconds: float  # age of the oldest unacked message, 0 without lag
    in_flight: int
    pending_redelivery: int
    consumers: tuple[ConsumerView, ...]
    tag_filter: tuple[str, ...] | None
    missed: int  # messages removed (retention, limits, disk policy) before this group consumed them
    behind_retention: bool
    acked: int  # messages acknowledged since the broker started

    @property
    def oldest_unacked_age_ms(self) -> int:
        return round(self.lag_seconds * 1000)


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
    dead_lettered: int  # since the broker started
    settings: dict[str, Any]
    delivered: int  # deliveries since the broker started, redeliveries included
    groups: tuple[GroupView, ...]

    @property
    def worst_group(self) -> GroupView | None:
        """The group with the most lag (ties: the oldest unacked message)."""
        return max(self.groups, key=lambda g: (g.lag, g.lag_seconds), default=None)


@dataclass(frozen=True, slots=True)
class ExchangeView:
    name: str
    type: str
    alternate_exchange: str | None
    messages_in: int
    messages_unroutable: int
    bindings: int


@dataclass(frozen=True, slots=True)
class ChunkView:
    number: int
    state: str  # "active" | "sealed"
    file: str  # relative to the data directory
    data_bytes: int
    records: int
    reads_cache: int
    reads_disk: int
    writes: int
    created_ms: int
    first_timestamp: int
    live_bytes: int  # bytes of records some queue still needs (an upper bound for fanned-out records)
    live_share: float  # live_bytes / the chunk size: below CHUNKMQ_GC_THRESHOLD the collector rewrites it
    file_bytes: int  # what the file takes on disk
    rewritten: bool  # written by the collector
    last: int  # highest chunk number whose records the file holds (number unless chunks were merged)


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
class Overview:
    version: str
    uptime_seconds: float
    durability: str
    exchanges: int
    queues: int
    groups: int
    messages: int
    bytes: int
    disk_used_bytes: int
    disk_free_bytes: int
    disk_budget_bytes: int
    publish_rate: float
    deliver_rate: float
    ack_rate: float
    published: int
    delivered: int
    acked: int
    dead_lettered: int
    dropped: int
    retention_freed_bytes: int
    retention_deleted_chunks: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def group_view(broker: Broker, queue: Queue, group: Group, now: int | None = None) -> GroupView:
    store = broker.store
    now = _now_ms() if now is None else now
    floor = group.ack_floor
    end = store.next_offset(queue.id)
    oldest = store.timestamp_of(queue.id, floor) if floor < end else None
    return GroupView(
        queue=queue.name,
        name=group.name,
        ack_floor=floor,
        next_offset=group.next_offset,
        lag=group.lag_in(store),
        lag_seconds=max(0, now - oldest) / 1000 if oldest is not None else 0.0,
        in_flight=len(group.in_flight),
        pending_redelivery=len(group.pending),
        consumers=tuple(
            ConsumerView(c, seen) for c, seen in group.consumers.items() if now - seen <= CONSUMER_FORGET_MS
        ),
        tag_filter=group.tag_filter,
        missed=group.missed,
        behind_retention=floor < store.first_offset(queue.id),
        acked=group.acked,
    )


def queue_view(broker: Broker, queue: Queue, now: int | None = None) -> QueueView:
    store = broker.store
    first, end = store.first_offset(queue.id), store.next_offset(queue.id)
    now = _now_ms() if now is None else now
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
        settings=queue.settings.as_dict(),
        delivered=queue.delivered,
        groups=tuple(group_view(broker, queue, g, now) for g in list(queue.groups.values())),
    )


def queue_views(broker: Broker) -> list[QueueView]:
    now = _now_ms()
    return [queue_view(broker, q, now) for q in sorted(broker.queues.values(), key=lambda q: q.name)]


def lagging_groups(broker: Broker, n: int) -> list[GroupView]:
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

    now = _now_ms()
    top = heapq.nlargest(n, lagging, key=oldest_first) if len(lagging) > n else lagging
    return sorted((group_view(broker, q, g, now) for _, q, g in top), key=lambda v: (v.lag, v.lag_seconds), reverse=True)


def exchange_view(exchange: Exchange) -> ExchangeView:
    return ExchangeView(
        name=exchange.name or DEFAULT_EXCHANGE_ALIAS,
        type=exchange.type.value,
        alternate_exchange=exchange.alternate_exchange,
        messages_in=exchange.messages_in,
        messages_unroutable=exchange.messages_unroutable,
        bindings=len(exchange.bindings),
    )


def exchange_views(broker: Broker) -> list[ExchangeView]:
    return [exchange_view(e) for e in sorted(broker.routing.exchanges.values(), key=lambda e: e.name)]


def chunk_views(broker: Broker) -> list[ChunkView]:
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


def index_views(broker: Broker) -> list[IndexView]:
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


def overview(broker: Broker) -> Overview:
    store = broker.store
    stats = broker.stats
    queues = list(broker.queues.values())
    disk = shutil.disk_usage(broker.settings.data_dir)
    return Overview(
        version=__version__,
        uptime_seconds=round(time.time() - stats.started, 1),
        durability=broker.durability,
        exchanges=len(broker.routing.exchanges),
        queues=len(queues),
        groups=sum(len(q.groups) for q in queues),
        messages=store.held()[0],  # kept up to date per changed queue, not summed over every queue
        bytes=store.held()[1],
        disk_used_bytes=store.disk_bytes(),
        disk_free_bytes=disk.free,
        disk_budget_bytes=broker.settings.disk_budget_bytes,
        publish_rate=round(stats.published.per_second, 1),
        deliver_rate=round(stats.delivered.per_second, 1),
        ack_rate=round(stats.acked.per_second, 1),
        published=stats.published.total,
        delivered=stats.delivered.total,
        acked=stats.acked.total,
        dead_lettered=stats.dead_lettered,
        dropped=stats.dropped,
        retention_freed_bytes=stats.retention_freed_bytes,
        retention_deleted_chunks=stats.retention_deleted_chunks,
    )


# ---------------------------------------------------------------------- JSON shapes (API.md)


def group_json(g: GroupView) -> dict[str, Any]:
    return {
        "name": g.name,
        "ack_floor": g.ack_floor,
        "next_offset": g.next_offset,
        "lag": g.lag,
        "lag_seconds": g.lag_seconds,
        "oldest_unacked_age_ms": g.oldest_unacked_age_ms,
        "in_flight": g.in_flight,
        "pending_redelivery": g.pending_redelivery,
        "consumers": [{"id": c.id, "last_seen": c.last_seen} for c in g.consumers],
        "tag_filter": list(g.tag_filter) if g.tag_filter is not None else None,
        "missed": g.missed,
        "behind_retention": g.behind_retention,
    }


def queue_json(q: QueueView) -> dict[str, Any]:
    return {
        "name": q.name,
        "id": q.id,
        "first_offset": q.first_offset,
        "next_offset": q.next_offset,
        "messages": q.messages,
        "bytes": q.bytes,
        "producer_visible": q.producer_visible,
        "consumer_visible": q.consumer_visible,
        "messages_in": q.messages_in,
        "messages_dropped": q.messages_dropped,
        "dead_lettered": q.dead_lettered,
        **q.settings,
        "groups": [group_json(g) for g in q.groups],
    }


def overview_json(o: Overview) -> dict[str, Any]:
    return {
        "version": o.version,
        "uptime_seconds": o.uptime_seconds,
        "durability": o.durability,
        "totals": {
            "exchanges": o.exchanges, "queues": o.queues, "groups": o.groups, "messages": o.messages,
            "bytes": o.bytes, "disk_used_bytes": o.disk_used_bytes, "disk_free_bytes": o.disk_free_bytes,
            "disk_budget_bytes": o.disk_budget_bytes,
        },
        "rates": {"publish": o.publish_rate, "deliver": o.deliver_rate, "ack": o.ack_rate},
        "counters": {
            "published": o.published, "delivered": o.delivered, "acked": o.acked,
            "dead_lettered": o.dead_lettered, "dropped": o.dropped,
        },
        "retention": {"freed_bytes": o.retention_freed_bytes, "deleted_chunks": o.retention_deleted_chunks},
    }


def as_json(view: ExchangeView | ChunkView) -> dict[str, Any]:
    """Flat views render field for field."""
    return dataclasses.asdict(view)
