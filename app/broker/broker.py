"""The broker: routing, publishing, consuming and the admin operations, over storage and metadata.

`Broker` is assembled from one part per concern:
    base.py        the shared state, lookups and dead-lettering
    publishing.py  publish, queue limits
    consuming.py   consumer groups, delivery, acknowledgements, retention
    broker.py      (this file) opening and closing, exchanges, queues, bindings, browsing

Threading: every method runs on the event loop thread, which is the one writer of the in-memory
state (routing table, queues, groups). The storage engine is called directly from the loop for
appends and reads (page-cache copies, no fsync); fsync waits go through `Store.durable()` futures,
and SQL runs in worker threads (`asyncio.to_thread`), never on the publish or pull path.
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from chunkmq.auth.bootstrap import ADMIN_TOKEN_FILE
from chunkmq.broker.base import log, now_ms, one_at_a_time
from chunkmq.broker.committer import Committer
from chunkmq.broker.consuming import Consuming
from chunkmq.broker.dedup import IdempotencyWindow, WindowSnapshots, key_scope
from chunkmq.broker.disk import DiskGuard
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from chunkmq.broker.group import Group, GroupChanges, monotonic_ms
from chunkmq.broker.history import History
from chunkmq.broker.message import (
    FLAG_SCOPED_KEY,
    MessageLimits,
    decode_data,
    position_of,
    render,
    render_all,
)
from chunkmq.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS, check_name, check_new_name
from chunkmq.broker.pausing import PauseTimers
from chunkmq.broker.publishing import Publishing, PublishOutcome
from chunkmq.broker.queue import Queue, QueueSettings
from chunkmq.broker.resting import LaggingGroups
from chunkmq.broker.routing import Binding, Exchange, ExchangeType, RoutingTable
from chunkmq.broker.scheduling import Schedule, decode_delayed
from chunkmq.broker.stats import BrokerStats
from chunkmq.config import FsyncSetting, Settings
from chunkmq.meta.rows import GroupRow, MetaSnapshot, TokenRow, UserRow
from chunkmq.storage import FsyncMode, StorageError, Store, StoreOptions
from chunkmq.storage.files import create_file, private_dir, restrict_tree
from chunkmq.storage.lock import LOCK_FILE
from chunkmq.wire import codes

if TYPE_CHECKING:
    from chunkmq.broker.tier import Tier
    from chunkmq.meta import MetaStore

__all__ = ["Broker", "PublishOutcome", "parse_binding", "parse_exchange"]

# What chunkmq keeps in its data directory, tightened to owner-only on start (an older version
# created them with the umask's mode); anything else there is left alone.
OWNER_ONLY_MARKER = "owner-only"  # restrict_once's: the data directory was tightened
_OWN_ENTRIES = ("store", "dedup", "meta.db", "meta.db-journal", "meta.db-wal", "meta.db-shm", ADMIN_TOKEN_FILE,
                LOCK_FILE)

GROUP_COMMIT_SECONDS = 1.0  # group state is written behind at most this often (and per ack with fsync=always)
_DURABILITY = {FsyncSetting.ALWAYS: "fsync", FsyncSetting.INTERVAL: "interval", FsyncSetting.NEVER: "none"}


def restrict_once(data_dir: Path) -> None:
    """Tighten what an older version left readable by others (restrict_tree), once: the marker file
    says it was done, and everything this version creates is owner-only already. A start then walks
    none of the data directory (hundreds of thousands of entries with many queues)."""
    marker = data_dir / OWNER_ONLY_MARKER
    if marker.exists():
        return
    changed = restrict_tree(data_dir, _OWN_ENTRIES)
    if changed:
        log.warning("%d files and directories under %s were readable by others: now owner-only", changed, data_dir)
    os.close(create_file(marker))


def _as_json(settings: Mapping[str, Any]) -> str:
    """Settings in a message as the client wrote them: JSON, not Python's repr (None, True)."""
    return orjson.dumps(settings, default=str).decode()


@dataclass(slots=True)
class DedupRecovery:
    """How the idempotency window was rebuilt on start (logged)."""

    segments: int = 0  # snapshot segments loaded; 0: none usable, the whole window was scanned
    snapshot_keys: int = 0  # keys from them still inside the window
    scanned_from: int | None = None  # log position the scan started at; None: the start of the window
    records_scanned: int = 0
    scanned_keys: int = 0  # keys found by the scan
    seconds: float = 0.0

    def __str__(self) -> str:
        """The log's sentence: where the keys came from and how long it took (the repr has the fields)."""
        if self.scanned_from is None:
            source = (f"no usable snapshot, {self.scanned_keys} from {self.records_scanned} records scanned over "
                      "the window")
        else:
            source = (f"{self.snapshot_keys} from {self.segments} snapshot segments, {self.scanned_keys} more from "
                      f"{self.records_scanned} records scanned from position {self.scanned_from}")
        return f"{source}, in {self.seconds * 1000:.1f} ms"


def parse_exchange(name: str, body: Mapping[str, Any], *, builtin: bool = False) -> tuple[ExchangeType, str | None]:
    """Validate an exchange declare (PUT /exchanges/{name}): its (type, alternate exchange).
    `builtin`: a redeclare of the default exchange, whose reserved name is fine."""
    if not builtin:
        check_new_name(name, "exchange name")
    unknown = body.keys() - {"type", "alternate_exchange"}
    if unknown:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
    try:
        kind = ExchangeType(body.get("type"))
    except ValueError:
        raise InvalidInput("type must be one of direct, fanout, topic, headers, hash") from None
    alternate = body.get("alternate_exchange")
    if alternate is not None:
        check_name(alternate, "alternate_exchange")
    return kind, alternate


def parse_binding(body: Mapping[str, Any]) -> tuple[str, str, str, dict[str, str]]:
    """Validate a binding (POST /bindings): its (exchange, queue, routing key, arguments)."""
    unknown = body.keys() - {"exchange", "queue", "routing_key", "arguments"}
    if unknown:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
    exchange_name, queue_name = body.get("exchange"), body.get("queue")
    if not isinstance(exchange_name, str) or not isinstance(queue_name, str):
        raise InvalidInput("exchange and queue are required strings")
    if exchange_name in (DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS):
        raise InvalidInput("the default exchange routes by queue name and cannot be bound")
    check_name(exchange_name, "exchange name")
    check_name(queue_name, "queue name")
    routing_key = body.get("routing_key", "")
    if type(routing_key) is not str or len(routing_key) > 255:
        raise InvalidInput("routing_key must be a string of at most 255 characters")
    arguments = body.get("arguments") or {}
    if type(arguments) is not dict or not all(type(v) is str for v in arguments.values()):
        raise InvalidInput("arguments must be an object of strings")
    if arguments.get("x-match", "all") not in ("all", "any"):
        raise InvalidInput("x-match must be all or any")
    return exchange_name, queue_name, routing_key, arguments


class Broker(Publishing, Consuming):
    def __init__(self, settings: Settings, store: Store, meta: MetaStore) -> None:
        self.settings = settings
        self.store = store
        self.meta = meta
        self.routing = RoutingTable()
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self._names: list[str] | None = None  # the queues' names sorted (sorted_queue_names); None: not built yet
        self.dedup = IdempotencyWindow(settings.dedup_window_seconds * 1000)
        self.dedup_snapshots = WindowSnapshots(settings.data_dir / "dedup")
        self._dedup_written_to = -1  # the log position the newest snapshot segment covers
        self.stats = BrokerStats()
        self.disk = DiskGuard(settings, store)
        self.schedule = Schedule.open(settings.data_dir / "due", store)
        self.schedule_wake = asyncio.Event()
        self._losses = {}
        self.durability = _DURABILITY[settings.fsync]
        self.message_limits = MessageLimits(settings.max_headers, settings.max_header_bytes)
        self._creating: dict[tuple[int, str], asyncio.Future[Group]] = {}
        self.committer = Committer(self.commit_groups, GROUP_COMMIT_SECONDS)
        # What changed since the rounds last looked (consuming.py): they visit only that.
        self.group_changes = GroupChanges()
        self.pause_timers = PauseTimers()
        self.active_groups: set[Group] = set()  # single-active-consumer groups: their leases end in sweeps
        self.dropped_changed: set[Queue] = set()  # queues whose messages_dropped the commit has not written
        self.retention_due: set[int] = set()  # queues retention must look at whatever else changed
        self.aging: list[tuple[int, int]] = []  # heap: (epoch ms the oldest message ages out, queue id)
        self.aging_at: dict[int, int] = {}  # queue id -> its entry in `aging` that counts (others are stale)
        self.lagging = LaggingGroups(self)
        self.history = History(self)
        self._admin = asyncio.Lock()
        self.tier: Tier | None = None  # tiered storage (tier.py), opened by the app with CHUNKMQ_TIER_URL

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, settings: Settings, meta: MetaStore, snapshot: MetaSnapshot | None = None) -> Broker:
        """Open the store (running its recovery) and load the routing table from the database, or
        from `snapshot` when it was read already (without the ORM: app/meta/plain.py)."""
        private_dir(settings.data_dir)
        restrict_once(settings.data_dir)
        if settings.tier_url:  # a data directory without chunks is restored from the tier's bucket
            from chunkmq.broker.tier import restore_if_empty

            snapshot = snapshot or meta.load()
            restore_if_empty(settings, [row.id for row in snapshot.queues])
        store = Store.open(
            settings.data_dir / "store",
            StoreOptions(
                chunk_size=settings.chunk_size,
                index_chunk_entries=settings.index_chunk_entries,
                fsync=FsyncMode(settings.fsync.value),
                fsync_interval_ms=settings.fsync_interval_ms,
                max_message_bytes=settings.max_message_bytes,
                max_batch_bytes=min(settings.max_batch_bytes, settings.chunk_size),
                gc_threshold=settings.gc_threshold,
            ),
        )
        broker = cls(settings, store, meta)
        broker._load(snapshot or broker.meta.load())
        broker.disk.measure_now()  # the first publishes are checked against a real measurement
        return broker

    def _load(self, snapshot: MetaSnapshot) -> None:
        for row in snapshot.exchanges:
            self.routing.exchanges[row.name] = Exchange(row.name, ExchangeType(row.type), row.alternate_exchange)
        for row in snapshot.queues:
            self._add_queue(row)
        now = monotonic_ms()
        for row in snapshot.groups:
            queue = self.queues_by_id.get(row.queue_id)
            if queue is not None:
                queue.groups[row.name] = self._restore_group(queue, row, now)
        for row in snapshot.bindings:
            self.routing.add_binding(
                Binding(row.id, row.exchange, row.queue, row.routing_key, dict(row.arguments or {}))
            )
        self._rebuild_dedup_window()

    def _restore_group(self, queue: Queue, row: GroupRow, now: int) -> Group:
        """A group as it was written, clamped to the recovered log: a position past the queue's end
        would skip messages published after the restart (the lost tail's offsets are reused)."""
        end = self.store.next_offset(queue.id)
        floor, next_offset = row.ack_floor, row.next_offset if row.next_offset is not None else row.ack_floor
        done = row.done
        if next_offset > end or floor > end:
            log.warning(
                "group %r of queue %r: saved position (floor %d, next %d) is past the recovered end %d "
                "of the queue; clamped", row.name, queue.name, floor, next_offset, end,
            )
            floor, next_offset = min(floor, end), min(next_offset, end)
            done = tuple((a, min(b, end)) for a, b in done if a < end)
        group = Group(row.queue_id, row.name, next_offset=floor, tag_filter=row.tag_filter, missed=row.missed,
                      tracker=self.group_changes)
        group.restore(next_offset, done, now)
        if row.paused and (row.paused_until_ms is None or row.paused_until_ms > now_ms()):
            group.pause(row.paused_until_ms)
            self.pause_timers.add(group)
        if row.single_active_consumer:
            group.single_active_consumer = True
            self.active_groups.add(group)
        return group

    def _add_queue(self, row: Any) -> Queue:
        settings = QueueSettings.stored(row)
        queue = Queue(row.id, row.name, settings, row.producer_visible, row.consumer_visible,
                      messages_dropped=row.messages_dropped, committed_dropped=row.messages_dropped)
        self.store.create_queue(queue.id)
        self.queues[queue.name] = queue
        self.queues_by_id[queue.id] = queue
        if self._names is not None:
            insort(self._names, queue.name)
        return queue

    def sorted_queue_names(self) -> list[str]:
        """The queues' names in order, kept sorted as queues come and go (the lists page through it
        with a binary search instead of sorting every name at each request). Do not change it."""
        if self._names is None:
            self._names = sorted(self.queues)
        return self._names

    # ------------------------------------------------------------------ idempotency window

    def _rebuild_dedup_window(self) -> None:
        """Refill the idempotency window from its snapshot segments plus the log after the newest one
        (see dedup.py); with no usable snapshot, by scanning the last window's worth of log."""
        if self.dedup.window_ms <= 0:
            return
        started = time.perf_counter()
        legacy = self.settings.data_dir / "dedup-window.json"  # written by clean shutdowns before segments
        legacy.unlink(missing_ok=True)
        since = now_ms() - self.dedup.window_ms
        loaded = self.dedup_snapshots.load(self.store.end_position, self._rescope_legacy_key)
        stats = DedupRecovery()
        if loaded is None:
            records = self.store.scan_since(since)
        else:
            self.dedup.load(loaded.keys, loaded.timestamps, loaded.results, since)
            stats.segments, stats.snapshot_keys, stats.scanned_from = loaded.segments, len(self.dedup), loaded.position
            records = self.store.scan(loaded.position)
        scanned = keyed = 0
        for record in records:
            scanned += 1
            if record.idempotency_key and record.timestamp >= since:
                keyed += 1
                key = record.idempotency_key.decode()
                if not record.flags & FLAG_SCOPED_KEY:  # written before keys were scoped
                    key = key_scope("x", decode_data(record.data).get("exchange", "")) + key
                self.dedup.put(key, record.timestamp, self._result(record.position, record.placements))
        seconds = round(time.perf_counter() - started, 3)
        stats.records_scanned, stats.scanned_keys, stats.seconds = scanned, keyed, seconds
        self._dedup_written_to = loaded.position if loaded is not None else -1
        log.info("idempotency window rebuilt: %d keys; %s", len(self.dedup), stats)
        log.debug("idempotency window rebuilt: %r", stats)

    def _rescope_legacy_key(self, key: str, result: bytes) -> str | None:
        """The scoped key of a bare key from a format 1 snapshot: scoped to the exchange its message went
        through, read from the log at the message's id; None when the record is gone."""
        try:
            record = self.store.read_at(position_of(orjson.loads(result)["id"]))
        except (KeyError, ValueError, TypeError, NotFound, StorageError):
            return None
        return key_scope("x", decode_data(record.data).get("exchange", "")) + key

    async def snapshot_dedup(self) -> None:
        """Write the keys put since the last snapshot segment, with the log position they cover, when
        anything changed (background task, every CHUNKMQ_DEDUP_SNAPSHOT_SECONDS)."""
        job = self._dedup_snapshot_job()
        if job is None:
            return
        to, recent, write = job
        try:
            await asyncio.to_thread(write)  # encoding and fsync off the loop
        except BaseException:
            self.dedup.give_back(recent)
            raise
        self._dedup_written_to = max(self._dedup_written_to, to)

    def _dedup_snapshot_job(self) -> tuple[int, list[tuple[str, int, bytes]], Callable[[], None]] | None:
        """Take what the next segment holds, on the loop thread and without awaiting in between: every
        publish appends and puts its keys in one synchronous step, so the keys put so far are exactly
        those of the records below the log's end now. Returns (position, entries, the write to run)."""
        dedup = self.dedup
        if dedup.window_ms <= 0:
            return None
        to, start = self.store.end_position, self._dedup_written_to
        recent = dedup.take_recent()
        if not recent and to == start:
            return None  # no new key, and the log did not move either
        expired_before = now_ms() - dedup.window_ms

        def write() -> None:
            self.dedup_snapshots.write(max(start, 0), to, recent, expired_before)

        return to, recent, write

    def close(self) -> None:
        """Flush and close the store; leave the idempotency window's last keys behind for the restart."""
        job = self._dedup_snapshot_job()
        marks, end = self.schedule.watermarks(), self.store.end_position
        self.store.close()
        self.schedule.flush(end, marks)  # the log is fsynced: every delivery up to the marks is durable
        if job is not None:
            job[2]()

    # ------------------------------------------------------------------ exchanges

    @one_at_a_time
    async def declare_exchange(self, name: str, body: Mapping[str, Any]) -> tuple[Exchange, bool]:
        """Create an exchange, or confirm an identical one. Returns (exchange, created). As in
        RabbitMQ, the default exchange (`amq.default`) may be declared as it is, and no other way."""
        builtin = name == DEFAULT_EXCHANGE_ALIAS
        kind, alternate = parse_exchange(name, body, builtin=builtin)
        existing = self.routing.exchanges.get(DEFAULT_EXCHANGE if builtin else name)
        if existing is not None:
            if existing.type is kind and existing.alternate_exchange == alternate:
                return existing, False
            current = {"type": existing.type.value, "alternate_exchange": existing.alternate_exchange}
            raise PreconditionFailed(f"exchange {name!r} exists with other settings: {_as_json(current)}")
        await asyncio.to_thread(self.meta.create_exchange, name=name, type=kind.value, alternate_exchange=alternate)
        exchange = Exchange(name, kind, alternate)
        self.routing.exchanges[name] = exchange
        return exchange, True

    @one_at_a_time
    async def delete_exchange(self, name: str, if_unused: bool) -> None:
        exchange = self.exchange(name)
        if name == DEFAULT_EXCHANGE:
            raise PreconditionFailed("the default exchange cannot be deleted")
        if if_unused and exchange.bindings:
            raise PreconditionFailed(f"exchange {name!r} has {len(exchange.bindings)} bindings")
        await asyncio.to_thread(self.meta.delete_exchange, name)
        del self.routing.exchanges[name]

    # ------------------------------------------------------------------ queues

    @one_at_a_time
    async def declare_queue(self, name: str, body: Mapping[str, Any]) -> tuple[Queue, bool]:
        check_new_name(name, "queue name")
        unknown = body.keys() - QueueSettings.names()
        if unknown:
            raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
        settings = QueueSettings.parse(dict(body))
        existing = self.queues.get(name)
        if existing is not None:
            if existing.settings == settings:
                return existing, False
            raise PreconditionFailed(
                f"queue {name!r} exists with other settings: {_as_json(existing.settings.as_dict())}")
        row = await asyncio.to_thread(self.meta.create_queue, name=name, **settings.as_dict())
        return self._add_queue(row), True

    @one_at_a_time
    async def update_queue(self, name: str, body: Mapping[str, Any]) -> Queue:
        queue = self.queue(name)
        allowed = QueueSettings.names() | {"producer_visible", "consumer_visible"}
        unknown = body.keys() - allowed
        if unknown:
            raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
        for flag in ("producer_visible", "consumer_visible"):
            if flag in body and type(body[flag]) is not bool:
                raise InvalidInput(f"{flag} must be true or false")
        settings = QueueSettings.parse(dict(body), base=queue.settings)
        producer_visible = body.get("producer_visible", queue.producer_visible)
        consumer_visible = body.get("consumer_visible", queue.consumer_visible)
        await asyncio.to_thread(
            self.meta.update_queue, name, producer_visible=producer_visible, consumer_visible=consumer_visible,
            **settings.as_dict(),
        )
        queue.settings = settings
        queue.producer_visible = producer_visible
        queue.consumer_visible = consumer_visible
        self.retention_due.add(queue.id)  # its age limit may have changed
        self.group_changes.touch_queue(queue.id)  # its views changed: the rounds on changed queues look again
        self.enforce_limits(queue)
        return queue

    def unconsumed(self, queue: Queue) -> int:
        """Messages no group has finished with: the largest group lag, or all messages without groups."""
        if queue.groups:
            return max(group.lag_in(self.store) for group in queue.groups.values())
        return self.store.next_offset(queue.id) - self.store.first_offset(queue.id)

    @one_at_a_time
    async def delete_queue(self, name: str, force: bool) -> None:
        queue = self.queue(name)
        pending = self.unconsumed(queue)
        if pending and not force:
            raise PreconditionFailed(
                f"queue {name!r} has {pending} unconsumed messages; retire it first or delete with force=true"
            )
        await asyncio.to_thread(self.meta.delete_queue, name)
        del self.queues[name]
        del self.queues_by_id[queue.id]
        if self._names is not None:
            del self._names[bisect_left(self._names, name)]
        self.history.forget(queue.id)
        self.routing.remove_bindings(lambda b: b.queue == name)
        for group in queue.groups.values():
            group.close()
        queue.notify()
        self.store.delete_queue(queue.id)
        self.schedule.forget(queue.id)

    def purge(self, name: str) -> int:
        queue = self.queue(name)
        dropped, _ = self.store.set_first_offset(queue.id, self.store.next_offset(queue.id), durable=True)
        return dropped

    # ------------------------------------------------------------------ bindings

    def bindings(self, exchange: str | None = None, queue: str | None = None) -> list[Binding]:
        result = [
            b
            for ex in self.routing.exchanges.values()
            for b in ex.bindings
            if (exchange is None or b.exchange == exchange) and (queue is None or b.queue == queue)
        ]
        return sorted(result, key=lambda b: b.id)

    @one_at_a_time
    async def bind(self, body: Mapping[str, Any]) -> tuple[Binding, bool]:
        exchange_name, queue_name, routing_key, arguments = parse_binding(body)
        exchange = self.exchange(exchange_name)
        self.queue(queue_name)
        for b in exchange.bindings:
            if b.queue == queue_name and b.routing_key == routing_key and dict(b.arguments) == arguments:
                return b, False
        row = await asyncio.to_thread(
            self.meta.create_binding, exchange=exchange_name, queue=queue_name,
            routing_key=routing_key, arguments=arguments,
        )
        binding = Binding(row.id, exchange_name, queue_name, routing_key, arguments)
        if exchange_name in self.routing.exchanges and queue_name in self.queues:
            self.routing.add_binding(binding)
        return binding, True

    def binding(self, binding_id: int) -> Binding:
        for b in self.bindings():
            if b.id == binding_id:
                return b
        raise NotFound(f"binding {binding_id} not found", code=codes.BINDING_NOT_FOUND)

    @one_at_a_time
    async def unbind(self, binding_id: int) -> None:
        self.binding(binding_id)
        await asyncio.to_thread(self.meta.delete_binding, binding_id)
        self.routing.remove_bindings(lambda b: b.id == binding_id)

    # ------------------------------------------------------------------ access (tokens, console users)

    async def create_token(
        self, name: str, *, is_admin: bool = False, configure: str = "", write: str = "", read: str = ""
    ) -> tuple[TokenRow, str]:
        """A new API token and its secret (shown once: only its hash is stored)."""
        return await asyncio.to_thread(
            self.meta.create_token, name, is_admin=is_admin, configure=configure, write=write, read=read)

    async def delete_token(self, token_id: int) -> None:
        await asyncio.to_thread(self.meta.delete_token, token_id)

    async def create_user(self, name: str, password: str, is_admin: bool = False) -> UserRow:
        return await asyncio.to_thread(self.meta.create_user, name, password, is_admin)

    async def delete_user(self, name: str) -> None:
        await asyncio.to_thread(self.meta.delete_user, name)

    async def set_password(self, name: str, password: str) -> None:
        await asyncio.to_thread(self.meta.set_password, name, password)

    # ------------------------------------------------------------------ reads

    def browse(self, name: str, offset: int | None, timestamp: int | None, limit: int) -> bytes:
        """Read by offset without a group (browsing, Spark): the JSON response body."""
        queue = self.queue(name)
        if timestamp is not None:
            offset = self.store.offset_for_timestamp(queue.id, timestamp)
        elif offset is None:
            offset = self.store.first_offset(queue.id)
        stored = self.store.read(queue.id, offset, limit)
        qj = queue.name_json
        parts = render_all(qj, zip(stored, repeat(0)))
        next_offset = stored[-1][0] + 1 if stored else max(offset, self.store.first_offset(queue.id))
        return b'{"messages":[%b],"next_offset":%d}' % (b",".join(parts), next_offset)

    def scheduled_messages(self, name: str, limit: int) -> dict[str, Any]:
        """A queue's delayed messages not due yet, the nearest first (at most `limit`), each with its
        due time: `{"scheduled": n, "messages": [...]}` (app/broker/scheduling.py)."""
        queue = self.queue(name)
        out: list[dict[str, Any]] = []
        for due, position in self.schedule.peek(queue.id, limit):
            try:
                record = self.store.read_at(position)
            except KeyError:
                continue
            fields = decode_data(decode_delayed(record.data)[2], record.tag)
            out.append({"id": f"{position:016x}", "deliver_at_ms": due, "timestamp": record.timestamp, **fields})
        return {"scheduled": self.schedule.scheduled(queue.id)[0], "messages": out}

    def offset_at(self, name: str, timestamp: int) -> int:
        """The offset of queue `name`'s first message at or after `timestamp` (epoch ms)."""
        return self.store.offset_for_timestamp(self.queue(name).id, timestamp)

    def get_message(self, id_: str) -> tuple[str | None, bytes]:
        """One message by id: (the name of the first queue holding it, if any; its JSON)."""
        position = position_of(id_)
        try:
            record = self.store.read_at(position)
        except (KeyError, ValueError):
            raise NotFound(f"no message with id {id_!r}", code=codes.MESSAGE_NOT_FOUND) from None
        placements = [(self.queues_by_id[q], o) for q, o in record.placements if q in self.queues_by_id]
        if placements:
            queue, offset = placements[0]
            return queue.name, render(queue.name_json, offset, record.position, record.timestamp, record.tag,
                                      record.data, 0)
        return None, render(b"null", -1, record.position, record.timestamp, record.tag, record.data, 0)
