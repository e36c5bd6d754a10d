"""The broker: routing, publishing, browsing and the admin operations, over storage and metadata.

Threading: every method runs on the event loop thread, which is the one writer of the in-memory
state (routing table, queues, groups). The storage engine is called directly from the loop for
appends and reads (page-cache copies, no fsync); fsync waits go through `Store.durable()` futures,
and SQL runs in worker threads (`asyncio.to_thread`), never on the publish or pull path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app import metrics
from app.broker.dedup import IdempotencyWindow
from app.broker.errors import (
    InvalidInput,
    NotFound,
    PreconditionFailed,
    QueueFull,
    StorageFull,
    TooLarge,
    Unroutable,
)
from app.broker.group import Group, monotonic_ms
from app.broker.message import (
    FLAG_BINARY,
    Outgoing,
    decode_data,
    message_id,
    parse_message,
    position_of,
    render,
)
from app.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS, check_name
from app.broker.queue import Overflow, Queue, QueueSettings
from app.broker.routing import Binding, Exchange, ExchangeType, RoutingTable
from app.broker.stats import BrokerStats
from app.config import FsyncSetting, Settings
from app.meta import MetaStore
from app.storage import (
    BatchTooLarge,
    FsyncMode,
    MessageTooLarge,
    NewMessage,
    Store,
    StoreOptions,
)
from app.storage import StorageFull as StoreFull

log = logging.getLogger("chunkmq.broker")

_DURABILITY = {FsyncSetting.ALWAYS: "fsync", FsyncSetting.INTERVAL: "interval", FsyncSetting.NEVER: "none"}
_RECORD_OVERHEAD = 40  # framing + fixed header of a record, for limit checks before a write


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class PublishOutcome:
    results: list[dict[str, Any]]
    durability: str


class Broker:
    def __init__(self, settings: Settings, store: Store, meta: MetaStore) -> None:
        self.settings = settings
        self.store = store
        self.meta = meta
        self.routing = RoutingTable()
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self.dedup = IdempotencyWindow(settings.dedup_window_seconds * 1000)
        self.stats = BrokerStats()
        self.durability = _DURABILITY[settings.fsync]
        self._creating: dict[tuple[int, str], asyncio.Future[Group]] = {}

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, settings: Settings, meta: MetaStore) -> Broker:
        """Open the store (running its recovery) and load the routing table from the database."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = Store.open(
            settings.data_dir / "store",
            StoreOptions(
                chunk_size=settings.chunk_size,
                index_chunk_entries=settings.index_chunk_entries,
                fsync=FsyncMode(settings.fsync.value),
                fsync_interval_ms=settings.fsync_interval_ms,
                max_message_bytes=settings.max_message_bytes,
                max_batch_bytes=min(settings.max_batch_bytes, settings.chunk_size),
            ),
        )
        broker = cls(settings, store, meta)
        broker._load()
        return broker

    def _load(self) -> None:
        snapshot = self.meta.load()
        for row in snapshot.exchanges:
            self.routing.exchanges[row.name] = Exchange(row.name, ExchangeType(row.type), row.alternate_exchange)
        for row in snapshot.queues:
            self._add_queue(row)
        for row in snapshot.groups:
            queue = self.queues_by_id.get(row.queue_id)
            if queue is not None:
                queue.groups[row.name] = Group(
                    row.queue_id, row.name, next_offset=row.ack_floor, committed_floor=row.ack_floor,
                    tag_filter=row.tag_filter,
                )
        for row in snapshot.bindings:
            self.routing.add_binding(
                Binding(row.id, row.exchange, row.queue, row.routing_key, dict(row.arguments or {}))
            )
        self._rebuild_dedup_window()

    def _add_queue(self, row: Any) -> Queue:
        settings = QueueSettings.parse({name: getattr(row, name) for name in QueueSettings.names()})
        queue = Queue(row.id, row.name, settings, row.producer_visible, row.consumer_visible)
        self.store.create_queue(queue.id)
        self.queues[queue.name] = queue
        self.queues_by_id[queue.id] = queue
        return queue

    def _rebuild_dedup_window(self) -> None:
        if self.dedup.window_ms <= 0:
            return
        for record in self.store.scan_since(now_ms() - self.dedup.window_ms):
            if record.idempotency_key:
                self.dedup.put(
                    record.idempotency_key.decode(), record.timestamp, self._result(record.position, record.placements)
                )

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ exchanges

    def exchange(self, name: str) -> Exchange:
        exchange = self.routing.exchanges.get(name)
        if exchange is None:
            raise NotFound(f"exchange {name!r} not found", code="exchange_not_found")
        return exchange

    async def declare_exchange(self, name: str, body: Mapping[str, Any]) -> tuple[Exchange, bool]:
        """Create an exchange, or confirm an identical one. Returns (exchange, created)."""
        check_name(name, "exchange name")
        if name.startswith("amq."):
            raise InvalidInput(f"exchange names starting with 'amq.' are reserved: {name!r}", code="invalid_name")
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
        existing = self.routing.exchanges.get(name)
        if existing is not None:
            if existing.type is kind and existing.alternate_exchange == alternate:
                return existing, False
            raise PreconditionFailed(
                f"exchange {name!r} exists with type {existing.type.value!r} and alternate exchange "
                f"{existing.alternate_exchange!r}"
            )
        await asyncio.to_thread(self.meta.create_exchange, name=name, type=kind.value, alternate_exchange=alternate)
        exchange = Exchange(name, kind, alternate)
        self.routing.exchanges[name] = exchange
        return exchange, True

    async def delete_exchange(self, name: str, if_unused: bool) -> None:
        exchange = self.exchange(name)
        if name == DEFAULT_EXCHANGE:
            raise InvalidInput("the default exchange cannot be deleted")
        if if_unused and exchange.bindings:
            raise PreconditionFailed(f"exchange {name!r} has {len(exchange.bindings)} bindings")
        await asyncio.to_thread(self.meta.delete_exchange, name)
        del self.routing.exchanges[name]

    # ------------------------------------------------------------------ queues

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"queue {name!r} not found", code="queue_not_found")
        return queue

    async def declare_queue(self, name: str, body: Mapping[str, Any]) -> tuple[Queue, bool]:
        check_name(name, "queue name")
        unknown = body.keys() - QueueSettings.names()
        if unknown:
            raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
        settings = QueueSettings.parse(dict(body))
        existing = self.queues.get(name)
        if existing is not None:
            if existing.settings == settings:
                return existing, False
            raise PreconditionFailed(f"queue {name!r} exists with other settings: {existing.settings.as_dict()}")
        row = await asyncio.to_thread(self.meta.create_queue, name=name, **settings.as_dict())
        if name in self.queues:  # declared concurrently while we were in the database
            return self.queues[name], False
        return self._add_queue(row), True

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
        self.enforce_limits(queue)
        return queue

    def unconsumed(self, queue: Queue) -> int:
        """Messages no group has finished with: the largest group lag, or all messages without groups."""
        if queue.groups:
            return max(group.lag_in(self.store) for group in queue.groups.values())
        return self.store.next_offset(queue.id) - self.store.first_offset(queue.id)

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
        self.routing.remove_bindings(lambda b: b.queue == name)
        for group in queue.groups.values():
            group.close()
        queue.notify()
        self.store.delete_queue(queue.id)

    def purge(self, name: str) -> int:
        queue = self.queue(name)
        dropped, _ = self.store.set_first_offset(queue.id, self.store.next_offset(queue.id), durable=True)
        return dropped

    def queue_info(self, queue: Queue) -> dict[str, Any]:
        first, end = self.store.first_offset(queue.id), self.store.next_offset(queue.id)
        return {
            "name": queue.name,
            "id": queue.id,
            "first_offset": first,
            "next_offset": end,
            "messages": end - first,
            "bytes": self.store.queue_bytes(queue.id),
            "producer_visible": queue.producer_visible,
            "consumer_visible": queue.consumer_visible,
            "messages_in": queue.messages_in,
            "messages_dropped": queue.messages_dropped,
            **queue.settings.as_dict(),
            "groups": [group.info(self.store) for group in queue.groups.values()],
        }

    # ------------------------------------------------------------------ bindings

    def bindings(self, exchange: str | None = None, queue: str | None = None) -> list[Binding]:
        result = [
            b
            for ex in self.routing.exchanges.values()
            for b in ex.bindings
            if (exchange is None or b.exchange == exchange) and (queue is None or b.queue == queue)
        ]
        return sorted(result, key=lambda b: b.id)

    async def bind(self, body: Mapping[str, Any]) -> tuple[Binding, bool]:
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
        raise NotFound(f"binding {binding_id} not found", code="binding_not_found")

    async def unbind(self, binding_id: int) -> None:
        self.binding(binding_id)
        await asyncio.to_thread(self.meta.delete_binding, binding_id)
        self.routing.remove_bindings(lambda b: b.id == binding_id)

    # ------------------------------------------------------------------ publish

    async def publish(
        self, exchange_name: str, raw: Any, mandatory: bool = False, *, queue_name: str | None = None
    ) -> PublishOutcome:
        """Route and store a batch; the batch is stored entirely or not at all.

        Returns once the batch is durable under the configured fsync mode.
        """
        results, end_position = self._publish_now(exchange_name, raw, mandatory, queue_name)
        if end_position is not None:
            future = self.store.durable(end_position)
            if not future.done():
                started = time.perf_counter()
                await asyncio.wrap_future(future)
                metrics.fsync_wait.observe(time.perf_counter() - started)
        return PublishOutcome(results, self.durability)

    def _publish_now(
        self, exchange_name: str, raw: Any, mandatory: bool, queue_name: str | None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """The synchronous part of a publish: validate, route, check limits, append."""
        if type(raw) is not list or not raw:
            raise InvalidInput("messages must be a non-empty array")
        if len(raw) > self.settings.max_batch_messages:
            raise TooLarge(
                f"a batch holds at most {self.settings.max_batch_messages} messages", code="batch_too_large"
            )
        if queue_name is not None:
            target = self.queue(queue_name)
            if not target.producer_visible:
                raise PreconditionFailed(f"queue {queue_name!r} is not visible to producers")
            exchange = self.routing.exchanges[DEFAULT_EXCHANGE]
        else:
            exchange = self.exchange(exchange_name)
            target = None
        max_bytes = self.settings.max_message_bytes
        now = now_ms()
        messages: list[NewMessage] = []
        routed_queues: list[list[Queue]] = []
        # Per request message: the index of its stored message, or the result of an earlier duplicate.
        slots: list[int | dict[str, Any]] = []
        duplicates_in_batch: dict[int, int] = {}  # slot -> index of the first message with its key
        batch_keys: dict[str, int] = {}
        unroutable = 0
        queues = self.queues
        for i, item in enumerate(raw):
            out: Outgoing = parse_message(item, exchange.name, i)
            if len(out.data) > max_bytes:
                raise TooLarge(f"messages[{i}] is larger than {max_bytes} bytes", code="message_too_large")
            key = out.idempotency_key
            if key is not None:
                earlier = self.dedup.get(key, now)
                if earlier is not None:
                    slots.append({**earlier, "duplicate": True})
                    continue
                if key in batch_keys:
                    duplicates_in_batch[len(slots)] = batch_keys[key]
                    slots.append(batch_keys[key])
                    continue
                batch_keys[key] = len(messages)
            if target is not None:
                targets = [target]
            else:
                names = self.routing.route(exchange, out.routing_key, out.headers, queues)
                targets = [q for n in names if (q := queues.get(n)) is not None and q.producer_visible]
            if not targets:
                unroutable += 1
            slots.append(len(messages))
            routed_queues.append(targets)
            messages.append(
                NewMessage(
                    data=out.data,
                    queues=[q.id for q in targets],
                    tag=out.tag.encode() if out.tag else b"",
                    idempotency_key=key.encode() if key else b"",
                    flags=out.flags,
                )
            )
        exchange.messages_in += len(raw)
        if unroutable:
            exchange.messages_unroutable += unroutable
            if mandatory:
                raise Unroutable(f"{unroutable} message(s) of a mandatory publish matched no queue")
        if not messages:  # every message was a duplicate of an earlier publish
            return [s for s in slots if isinstance(s, dict)], None
        self._check_room(messages, routed_queues)
        try:
            appended = self.store.append(messages)
        except MessageTooLarge as exc:
            raise TooLarge(str(exc), code="message_too_large") from exc
        except BatchTooLarge as exc:
            raise TooLarge(str(exc), code="batch_too_large") from exc
        except StoreFull as exc:
            raise StorageFull(f"the disk is full; nothing of this batch was stored ({exc})") from exc

        results = [self._result(a.position, a.offsets) for a in appended]
        for key, index in batch_keys.items():
            self.dedup.put(key, appended[index].timestamp, results[index])
        counts: dict[int, int] = {}
        for targets in routed_queues:
            for q in targets:
                counts[q.id] = counts.get(q.id, 0) + 1
        for queue_id, count in counts.items():
            q = self.queues_by_id[queue_id]
            q.messages_in += count
            if q.settings.max_messages is not None or q.settings.max_bytes is not None:
                self.enforce_limits(q)
            q.notify()
        self.stats.published.add(len(messages))
        metrics.published.inc(len(messages))
        out_results: list[dict[str, Any]] = []
        for slot_index, s in enumerate(slots):
            if isinstance(s, dict):
                out_results.append(s)
            elif slot_index in duplicates_in_batch:
                out_results.append({**results[s], "duplicate": True})
            else:
                out_results.append(results[s])
        return out_results, self.store.end_position

    def _result(self, position: int, placements: Iterable[tuple[int, int]]) -> dict[str, Any]:
        by_id = self.queues_by_id
        return {
            "id": message_id(position),
            "routed": [{"queue": by_id[q].name, "offset": o} for q, o in placements if q in by_id],
            "duplicate": False,
        }

    def _check_room(self, messages: list[NewMessage], routed: list[list[Queue]]) -> None:
        """reject_publish: refuse the whole batch when any queue would go over its limits."""
        incoming: dict[int, list[int]] = {}
        for message, targets in zip(messages, routed, strict=True):
            for q in targets:
                if q.settings.overflow is Overflow.REJECT_PUBLISH:
                    counts = incoming.setdefault(q.id, [0, 0])
                    counts[0] += 1
                    counts[1] += len(message.data) + _RECORD_OVERHEAD
        for queue_id, (count, size) in incoming.items():
            q = self.queues_by_id[queue_id]
            s = q.settings
            held = self.store.next_offset(q.id) - self.store.first_offset(q.id)
            if s.max_messages is not None and held + count > s.max_messages:
                raise QueueFull(f"queue {q.name!r} holds {held} of at most {s.max_messages} messages")
            if s.max_bytes is not None and self.store.queue_bytes(q.id) + size > s.max_bytes:
                raise QueueFull(f"queue {q.name!r} would exceed its {s.max_bytes} bytes")

    # ------------------------------------------------------------------ limits

    def enforce_limits(self, queue: Queue) -> int:
        """drop_head: move the queue's first offset up until it is within its limits."""
        s = queue.settings
        store = self.store
        first, end = store.first_offset(queue.id), store.next_offset(queue.id)
        new_first = first
        if s.max_messages is not None and end - new_first > s.max_messages:
            new_first = end - s.max_messages
        max_age = s.max_age_seconds or self.settings.default_max_age_seconds
        if max_age and first < end:
            new_first = max(new_first, store.offset_for_timestamp(queue.id, now_ms() - max_age * 1000))
        if s.max_bytes is not None and s.overflow is Overflow.DROP_HEAD:
            excess = store.queue_bytes(queue.id) - s.max_bytes
            if excess > 0:
                # Drop the oldest entries until the excess is gone (never past new_first's choice).
                offset = first
                while excess > 0 and offset < end:
                    entries = store.index_entries(queue.id, offset, min(1000, end - offset))
                    for entry in entries:
                        if excess <= 0:
                            break
                        excess -= entry.length
                        offset += 1
                new_first = max(new_first, offset)
        if new_first <= first:
            return 0
        dropped_messages = store.read(queue.id, first, new_first - first) if s.dead_letter_exchange is not None else []
        dropped, _ = store.set_first_offset(queue.id, new_first)
        queue.messages_dropped += dropped
        self.stats.dropped += dropped
        if dropped_messages:
            self.dead_letter(queue, dropped_messages, reason="maxlen", group=None, delivery_counts=None)
        return dropped

    def dead_letter(
        self,
        queue: Queue,
        stored: list[Any],
        *,
        reason: str,
        group: str | None,
        delivery_counts: Mapping[int, int] | None,
    ) -> int:
        """Republish messages through the queue's dead-letter exchange with x-death headers.

        Returns how many were routed somewhere. The caller only acks/drops them after this returned,
        so a message is never both lost and acked (the append is durable with the next fsync).
        """
        s = queue.settings
        if s.dead_letter_exchange is None:
            return 0
        exchange = self.routing.exchanges.get(
            DEFAULT_EXCHANGE if s.dead_letter_exchange in ("", DEFAULT_EXCHANGE_ALIAS) else s.dead_letter_exchange
        )
        if exchange is None:
            log.warning("queue %s: dead-letter exchange %r does not exist", queue.name, s.dead_letter_exchange)
            return 0
        messages: list[NewMessage] = []
        for m in stored:
            fields = decode_data(m.data)
            headers = dict(fields.get("headers") or {})
            headers.update({
                "x-death-reason": reason,
                "x-death-queue": queue.name,
                "x-original-offset": str(m.offset),
                "x-original-exchange": fields.get("exchange", ""),
            })
            if group is not None:
                headers["x-death-group"] = group
            if delivery_counts is not None:
                headers["x-delivery-count"] = str(delivery_counts.get(m.offset, 0))
            routing_key = s.dead_letter_routing_key if s.dead_letter_routing_key is not None else fields["routing_key"]
            body = {"body_base64": fields["body_base64"]} if m.flags & FLAG_BINARY else {"body": fields["body"]}
            out = parse_message(
                {"routing_key": routing_key, "headers": headers, "tag": fields.get("tag"), **body}, exchange.name, 0
            )
            names = self.routing.route(exchange, out.routing_key, out.headers, self.queues)
            targets = [self.queues[n] for n in names if n in self.queues and n != queue.name]
            messages.append(NewMessage(out.data, [q.id for q in targets], out.tag.encode() if out.tag else b"", b"", out.flags))
        if not messages:
            return 0
        self.store.append(messages)
        routed = sum(1 for m in messages if m.queues)
        self.stats.dead_lettered += len(messages)
        for m in messages:
            for queue_id in m.queues:
                target = self.queues_by_id[queue_id]
                target.messages_in += 1
                target.notify()
        return routed

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
        parts = [render(qj, m.offset, m.position, m.timestamp, m.data, 0) for m in stored]
        next_offset = stored[-1].offset + 1 if stored else max(offset, self.store.first_offset(queue.id))
        return b'{"messages":[%b],"next_offset":%d}' % (b",".join(parts), next_offset)

    def get_message(self, id_: str) -> tuple[str | None, bytes]:
        """One message by id: (the name of the first queue holding it, if any; its JSON)."""
        position = position_of(id_)
        try:
            record = self.store.read_at(position)
        except (KeyError, ValueError):
            raise NotFound(f"no message with id {id_!r}", code="message_not_found") from None
        placements = [(self.queues_by_id[q], o) for q, o in record.placements if q in self.queues_by_id]
        if placements:
            queue, offset = placements[0]
            return queue.name, render(queue.name_json, offset, record.position, record.timestamp, record.data, 0)
        return None, render(b"null", -1, record.position, record.timestamp, record.data, 0)

    # ------------------------------------------------------------------ consumer groups

    def group(self, queue: Queue, name: str) -> Group:
        group = queue.groups.get(name)
        if group is None:
            raise NotFound(f"group {name!r} not found on queue {queue.name!r}", code="group_not_found")
        return group

    def _start_offset(self, queue: Queue, start: str) -> int:
        if start == "latest":
            return self.store.next_offset(queue.id)
        return self.store.first_offset(queue.id)

    async def declare_group(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> tuple[Group, bool]:
        queue = self.queue(queue_name)
        check_name(group_name, "group name")
        unknown = body.keys() - {"start", "tag_filter"}
        if unknown:
            raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
        start = body.get("start", "earliest")
        if start not in ("earliest", "latest"):
            raise InvalidInput("start must be earliest or latest")
        tags = body.get("tag_filter")
        if tags is not None and (
            type(tags) is not list or not all(type(t) is str and 0 < len(t) <= 255 for t in tags)
        ):
            raise InvalidInput("tag_filter must be a list of tags (strings of 1-255 characters) or null")
        tag_filter = tuple(tags) if tags is not None else None
        existing = queue.groups.get(group_name)
        if existing is not None:
            if "tag_filter" in body and existing.tag_filter != tag_filter:
                await asyncio.to_thread(
                    self.meta.upsert_group, queue.id, group_name, start=start, tag_filter=tag_filter
                )
                existing.set_tag_filter(tag_filter)
            return existing, False
        return await self._create_group(queue, group_name, start, tag_filter), True

    async def _create_group(self, queue: Queue, name: str, start: str, tag_filter: tuple[str, ...] | None) -> Group:
        """Create a group once, however many requests ask for it at the same moment (a thousand
        first pulls must not become a thousand database writes)."""
        key = (queue.id, name)
        creating = self._creating.get(key)
        if creating is not None:
            return await asyncio.shield(creating)
        future: asyncio.Future[Group] = asyncio.get_running_loop().create_future()
        self._creating[key] = future
        try:
            offset = self._start_offset(queue, start)
            await asyncio.to_thread(
                self.meta.upsert_group, queue.id, name, start=start, tag_filter=tag_filter, ack_floor=offset
            )
            group = queue.groups.get(name)
            if group is None:
                group = Group(queue.id, name, next_offset=offset, committed_floor=offset, tag_filter=tag_filter)
                queue.groups[name] = group
            future.set_result(group)
            return group
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a failure nobody else awaited is not logged twice
            raise
        finally:
            del self._creating[key]

    async def delete_group(self, queue_name: str, group_name: str) -> None:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        await asyncio.to_thread(self.meta.delete_group, queue.id, group_name)
        queue.groups.pop(group_name, None)
        group.close()
        queue.notify()

    async def pull(
        self, queue_name: str, group_name: str, max_messages: int, wait_ms: int, consumer: str
    ) -> bytes:
        """Deliver up to max_messages; waits up to wait_ms for a publish (or a redelivery) when
        nothing is ready. A publish wakes the wait at once: no polling."""
        queue = self.queue(queue_name)
        if not queue.consumer_visible:
            raise PreconditionFailed(f"queue {queue_name!r} is not visible to consumers")
        check_name(group_name, "group name")
        group = queue.groups.get(group_name) or await self._create_group(queue, group_name, "earliest", None)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            # Take the event before looking, so a publish between the look and the wait is not missed.
            arrived = queue.arrived
            delivered = self.deliver(queue, group, consumer, max_messages)
            remaining = deadline - time.monotonic()
            if delivered or remaining <= 0 or group.closed or queue.name not in self.queues:
                break
            try:
                await asyncio.wait_for(arrived.wait(), remaining)
            except TimeoutError:
                pass
        return b'{"messages":[%b]}' % b",".join(delivered)

    def deliver(self, queue: Queue, group: Group, consumer: str, max_messages: int) -> list[bytes]:
        """Hand out messages to one consumer: rendered JSON objects, now in flight."""
        now = monotonic_ms()
        self._expire(queue, group, now)
        taken = group.deliver(self.store, consumer, max_messages, queue.settings.ack_timeout_ms, now)
        if taken:
            self.stats.delivered.add(len(taken))
            metrics.delivered.inc(len(taken))
        qj = queue.name_json
        return [render(qj, m.offset, m.position, m.timestamp, m.data, count) for m, count in taken]

    def _expire(self, queue: Queue, group: Group, now: int) -> None:
        exhausted = group.expire(now, queue.settings.max_deliveries)
        if exhausted:
            self._dead_letter_offsets(queue, group, exhausted)

    def _dead_letter_offsets(self, queue: Queue, group: Group, exhausted: list[tuple[int, int]]) -> None:
        """Messages past max_deliveries: to the dead-letter exchange, or dropped and counted."""
        counts = dict(exhausted)
        stored = [m for offset in sorted(counts) for m in self.store.read(queue.id, offset, 1) if m.offset == offset]
        if queue.settings.dead_letter_exchange is not None:
            self.dead_letter(queue, stored, reason="delivery_limit", group=group.name, delivery_counts=counts)
        else:
            queue.messages_dropped += len(stored)
            self.stats.dropped += len(stored)

    def ack(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        if "up_to" in body:
            up_to = body["up_to"]
            if type(up_to) is not int or up_to < 0 or "offsets" in body:
                raise InvalidInput("give either offsets (a list of offsets) or up_to (an offset)")
            acked = group.ack_up_to(up_to, self.store.next_offset(queue.id))
            unknown: list[int] = []
        else:
            offsets = _offsets(body)
            acked, unknown = group.ack(offsets)
        self.stats.acked.add(acked)
        metrics.acked.inc(acked)
        return {"ack_floor": group.ack_floor, "acked": acked, "not_in_flight": unknown}

    def nack(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        offsets = _offsets(body)
        delay = body.get("delay_ms", 0)
        if type(delay) is not int or not 0 <= delay <= 24 * 3600 * 1000:
            raise InvalidInput("delay_ms must be an integer from 0 to 86400000")
        unknown, exhausted = group.nack(offsets, delay, monotonic_ms(), queue.settings.max_deliveries)
        if exhausted:
            self._dead_letter_offsets(queue, group, exhausted)
        if delay == 0:
            queue.notify()
        return {"ack_floor": group.ack_floor, "nacked": len(offsets) - len(unknown), "not_in_flight": unknown,
                "exhausted": len(exhausted)}  # past max_deliveries: dead-lettered, or dropped

    def seek(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> Group:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        first, end = self.store.first_offset(queue.id), self.store.next_offset(queue.id)
        if len(body) != 1:
            raise InvalidInput('give one of {"to": "earliest|latest"}, {"offset": n}, {"timestamp": ms}')
        if "to" in body:
            if body["to"] not in ("earliest", "latest"):
                raise InvalidInput("to must be earliest or latest")
            offset = first if body["to"] == "earliest" else end
        elif "offset" in body:
            if type(body["offset"]) is not int or body["offset"] < 0:
                raise InvalidInput("offset must be a non-negative integer")
            offset = min(max(body["offset"], first), end)
        elif "timestamp" in body:
            if type(body["timestamp"]) is not int or body["timestamp"] < 0:
                raise InvalidInput("timestamp must be epoch milliseconds")
            offset = self.store.offset_for_timestamp(queue.id, body["timestamp"])
        else:
            raise InvalidInput('give one of {"to": "earliest|latest"}, {"offset": n}, {"timestamp": ms}')
        group.seek(offset)
        queue.notify()
        return group

    # ------------------------------------------------------------------ background work

    def sweep(self) -> None:
        """Expire ack deadlines and wake consumers whose redeliveries are due (every ~100 ms)."""
        now = monotonic_ms()
        for queue in list(self.queues.values()):
            due = False
            for group in list(queue.groups.values()):
                ready = group.next_ready()
                if ready is not None and ready <= now:
                    self._expire(queue, group, now)
                    due = True
            if due:
                queue.notify()

    def retention_floors(self) -> dict[int, int]:
        """Per queue, the offset below which no group needs its messages (EQueue: delete only what
        every consumer is done with). Queues without groups keep everything from their first offset."""
        floors: dict[int, int] = {}
        for queue in self.queues.values():
            first = self.store.first_offset(queue.id)
            if queue.groups:
                floors[queue.id] = max(first, min(g.ack_floor for g in queue.groups.values()))
            else:
                floors[queue.id] = first
        return floors

    def floors_to_commit(self) -> list[tuple[int, str, int]]:
        return [
            (queue.id, group.name, group.ack_floor)
            for queue in self.queues.values()
            for group in queue.groups.values()
            if group.ack_floor != group.committed_floor
        ]

    async def commit_floors(self) -> int:
        """Write changed ack floors behind, in one transaction. In fsync=always mode the log is made
        durable first, so dead-lettered copies are on disk before their originals count as done."""
        floors = self.floors_to_commit()
        if not floors:
            return 0
        await asyncio.wrap_future(self.store.durable(self.store.end_position))
        await asyncio.to_thread(self.meta.save_group_floors, floors)
        for queue_id, name, floor in floors:
            queue = self.queues_by_id.get(queue_id)
            group = queue.groups.get(name) if queue is not None else None
            if group is not None:
                group.committed_floor = floor
        return len(floors)

    async def run_retention(self) -> None:
        for queue in list(self.queues.values()):
            self.enforce_limits(queue)
        report = await asyncio.to_thread(
            self.store.retain, self.retention_floors(), disk_budget_bytes=self.settings.disk_budget_bytes
        )
        self.stats.retention_freed_bytes += report.bytes_freed
        self.stats.retention_deleted_chunks += len(report.chunks_deleted)
        for queue_id, (messages, _) in report.dropped.items():
            queue = self.queues_by_id.get(queue_id)
            if queue is not None:
                queue.messages_dropped += messages
                self.stats.dropped += messages
        if report.chunks_deleted:
            log.info("retention deleted chunks %s, freed %d bytes", report.chunks_deleted, report.bytes_freed)


def _offsets(body: Mapping[str, Any]) -> list[int]:
    offsets = body.get("offsets")
    if type(offsets) is not list or not offsets or len(offsets) > 100_000:
        raise InvalidInput("offsets must be a non-empty list of offsets")
    if not all(type(o) is int for o in offsets) or min(offsets) < 0:
        raise InvalidInput("offsets must be non-negative integers")
    return offsets
