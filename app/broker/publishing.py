"""Publishing: validate, route, check limits and store a batch; enforce queue limits (drop_head)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chunkmq.broker.base import BrokerBase, log, now_ms
from chunkmq.broker.dedup import key_scope
from chunkmq.broker.errors import (
    InvalidInput,
    PreconditionFailed,
    QueueFull,
    StorageFull,
    TooLarge,
    Unroutable,
)
from chunkmq.broker.message import (
    FLAG_SCOPED_KEY,
    NO_HEADERS,
    parse_batch,
    parse_binary_batch,
    plain_message,
    render_results,
)
from chunkmq.broker.names import DEFAULT_EXCHANGE
from chunkmq.broker.queue import Overflow, Queue
from chunkmq.broker.routing import Exchange
from chunkmq.broker.scheduling import DELAY_FIELDS, FLAG_DELAYED, decode_delayed, encode_delayed, has_delay, parse_delay
from chunkmq.broker.wake import Wake
from chunkmq.storage import (
    AppendedBatch,
    MessageColumns,
    QueueCap,
    QueueCapReached,
)
from chunkmq.storage import StorageFull as StoreFull
from chunkmq.wire import batch as wire
from chunkmq.wire import codes

SCHEDULE_TICK_MS = 5  # delayed messages are copied into their queues at most this often


@dataclass(slots=True)
class PublishOutcome:
    results: bytes  # the JSON array of per-message results, rendered once (no dicts per message),
    durability: str  # or with binary_answer the binary batch of results (render_results)

    def json(self) -> bytes:
        """The HTTP answer: {"results": [...], "durability": "..."}."""
        return b'{"results":%b,"durability":"%b"}' % (self.results, self.durability.encode())


_NOT_DUPLICATE = b'"duplicate":false}'


def as_duplicate(result: bytes) -> bytes:
    """The same result, marked as the answer to a repeated idempotency key."""
    return result[: -len(_NOT_DUPLICATE)] + b'"duplicate":true}'


class Publishing(BrokerBase):
    # ------------------------------------------------------------------ publish

    async def publish(
        self, exchange_name: str, raw: Any, mandatory: bool = False, *, queue_name: str | None = None,
        binary_answer: bool = False,
    ) -> PublishOutcome:
        """Route and store a batch; the batch is stored entirely or not at all.

        Returns once the batch is durable under the configured fsync mode. With `binary_answer`
        (binary batches only: they carry no idempotency keys, so no result is a duplicate) the
        results are a binary batch (render_results) instead of JSON.
        """
        outcome, wake = self.begin_publish(exchange_name, raw, mandatory, queue_name=queue_name,
                                           binary_answer=binary_answer)
        return outcome if wake is None else await self.durable(outcome, wake)

    def begin_publish(
        self, exchange_name: str, raw: Any, mandatory: bool = False, *, queue_name: str | None = None,
        binary_answer: bool = False,
    ) -> tuple[PublishOutcome, Wake | None]:
        """`publish` up to its wait: the outcome, and the wake to wait for (`durable`) before it may
        be answered, or None when it is durable already (fsync=interval or never). The flusher fires
        every wake an fsync ends in one call on the loop (Store.when_durable): a task is not needed to
        wait for it (app/api/wake.py)."""
        if binary_answer and type(raw) is not bytes:
            raise InvalidInput("a binary answer needs a binary batch body")
        store, durability = self.store, self.durability
        start = store.end_position if durability == "fsync" else 0  # (only an fsync is waited for)
        outcome = PublishOutcome(self._publish_now(exchange_name, raw, mandatory, queue_name, binary_answer),
                                 durability)
        if durability != "fsync" or store.end_position == start:  # need not wait, or stored nothing (duplicates)
            return outcome, None
        wake = Wake()
        waits = store.when_durable(store.end_position, asyncio.get_running_loop(), wake.settle)
        return outcome, wake if waits else None

    async def durable(self, outcome: PublishOutcome, wake: Wake) -> PublishOutcome:
        """`outcome`, once its publish is fsynced (begin_publish's outcome and wake)."""
        started = time.perf_counter()
        await wake
        from chunkmq import metrics  # prometheus_client: not before a restart answers (app/start.py)

        metrics.fsync_wait.observe(time.perf_counter() - started)
        return outcome

    def _publish_now(
        self, exchange_name: str, raw: Any, mandatory: bool, queue_name: str | None, binary_answer: bool = False
    ) -> bytes:
        """The synchronous part of a publish: validate, route, append (with the queues' caps and the
        disk budget, which the store checks with the batch's exact sizes); its results. `raw` is the
        list of message objects of a JSON body, or a binary batch body."""
        binary = type(raw) is bytes
        if not binary and (type(raw) is not list or not raw):
            raise InvalidInput("messages must be a non-empty array")
        if not binary and len(raw) > self.settings.max_batch_messages:
            raise TooLarge(
                f"a batch holds at most {self.settings.max_batch_messages} messages", code=codes.BATCH_TOO_LARGE
            )
        if queue_name is not None:
            target = self.queue(queue_name)
            if not target.producer_visible:
                raise PreconditionFailed(f"queue {queue_name!r} is not visible to producers")
            exchange = self.routing.exchanges[DEFAULT_EXCHANGE]
        else:
            exchange = self.exchange(exchange_name)
            target = None
        if not binary and len(raw) == 1 and (plain := plain_message(raw[0], exchange.name)) is not None:
            one = self._publish_one(exchange, target, *plain)
            if one is not None:
                return one
        if not binary and has_delay(raw):
            return self._publish_delayed(exchange, target, raw, mandatory)
        if binary:
            batch = parse_binary_batch(raw, exchange.name, self.settings.max_batch_messages)
        else:
            batch = parse_batch(raw, exchange.name, self.message_limits)
        full = batch.full
        # A binary batch's messages have no headers, tag or key (its `full` holds only bodies of bytes):
        # one of them, text or bytes, takes the one-message path (JSON's took plain_message above).
        if binary and len(batch.blobs) == 1:
            one = self._publish_one(exchange, target, batch.routing_keys[0], batch.blobs[0], binary_answer,
                                    full[0].flags if full else 0)
            if one is not None:
                return one
        max_bytes = self.settings.max_message_bytes
        now = now_ms()
        # Keys are scoped to the target: the same key on another exchange or queue is another message.
        scope = key_scope("q", queue_name) if queue_name is not None else key_scope("x", exchange.name)
        # The messages to store, field by field (MessageColumns): no object per message.
        data_column: list[bytes] = []
        queue_column: list[tuple[int, ...]] = []
        tag_column: list[bytes] = []
        key_column: list[bytes] = []
        flag_column: list[int] = []
        # Per request message: the index of its stored message, or the result of an earlier duplicate.
        slots: list[int | bytes] = []
        duplicates_in_batch: dict[int, int] = {}  # slot -> index of the first message with its key
        batch_keys: dict[str, int] = {}
        # Plain messages route by routing key alone: once per distinct key, and their counts per key.
        routes: dict[str, tuple[int, ...]] = {}
        per_route: dict[str, int] = {}  # routing key -> how many plain messages take it
        incoming: dict[int, int] = {}  # queue id -> the messages this batch adds
        unroutable = 0
        keys, blobs = batch.routing_keys, batch.blobs
        if not full and keys.count(keys[0]) == len(keys):
            # The common batch, every binary one to a queue among them: one routing key, no tags,
            # headers or idempotency keys. What the loop below does per message, in C loops.
            if max(map(len, blobs)) > max_bytes:
                i = next(i for i, data in enumerate(blobs) if len(data) > max_bytes)
                raise TooLarge(f"messages[{i}] is larger than {max_bytes} bytes", code=codes.MESSAGE_TOO_LARGE)
            ids = routes[keys[0]] = self._targets(exchange, target, keys[0], NO_HEADERS)
            per_route[keys[0]] = len(blobs)
            slots = list(range(len(blobs)))
            data_column, queue_column = blobs, [ids] * len(blobs)
            keys = blobs = []  # nothing left for the loop
        for i, (routing_key, data) in enumerate(zip(keys, blobs, strict=True)):
            if len(data) > max_bytes:
                raise TooLarge(f"messages[{i}] is larger than {max_bytes} bytes", code=codes.MESSAGE_TOO_LARGE)
            out = full.get(i) if full else None
            if out is None:
                ids = routes.get(routing_key)
                if ids is None:
                    ids = routes[routing_key] = self._targets(exchange, target, routing_key, NO_HEADERS)
                    per_route[routing_key] = 0
                per_route[routing_key] += 1
                slots.append(len(data_column))
                data_column.append(data)
                queue_column.append(ids)
                tag_column.append(b"")
                key_column.append(b"")
                flag_column.append(0)
                continue
            key = out.idempotency_key
            if key is not None:
                key = scope + key
                earlier = self.dedup.get(key, now)
                if earlier is not None:
                    slots.append(as_duplicate(earlier))
                    continue
                if key in batch_keys:
                    duplicates_in_batch[len(slots)] = batch_keys[key]
                    slots.append(batch_keys[key])
                    continue
                batch_keys[key] = len(data_column)
            ids = self._targets(exchange, target, routing_key, out.headers)
            if not ids:
                unroutable += 1
            tag = out.tag.encode() if out.tag else b""
            key_bytes = key.encode() if key else b""
            for q in ids:
                incoming[q] = incoming.get(q, 0) + 1
            slots.append(len(data_column))
            data_column.append(data)
            queue_column.append(ids)
            tag_column.append(tag)
            key_column.append(key_bytes)
            flag_column.append(out.flags | FLAG_SCOPED_KEY if key else out.flags)
        for routing_key, count in per_route.items():
            ids = routes[routing_key]
            if not ids:
                unroutable += count
            for q in ids:
                incoming[q] = incoming.get(q, 0) + count
        exchange.messages_in += len(slots)
        if unroutable:
            exchange.messages_unroutable += unroutable
            if mandatory:
                raise Unroutable(f"{unroutable} message(s) of a mandatory publish matched no queue")
        if not data_column:  # every message was a duplicate of an earlier publish
            return b"[%b]" % b",".join(s for s in slots if isinstance(s, bytes))
        messages = MessageColumns(data_column, queue_column, tag_column if any(tag_column) else None,
                                  key_column if any(key_column) else None, flag_column if any(flag_column) else None)
        disk = self.disk
        try:
            # the disk budget (reject policy) is checked by disk.admit: 507 before anything is written
            appended = self.store.append(messages, self._caps(incoming), disk.admit if disk.limit else None)
        except (QueueCapReached, StoreFull) as exc:
            raise self._refusal(exc) from exc
        disk.failure = None

        if binary_answer:  # a binary batch: no keys, no duplicates, nothing to remember
            self._after_append(incoming, len(messages))
            names = {q: self.queues_by_id[q].name.encode() for q in incoming}
            return render_results(appended, names)
        queue_json = self._one_queue(appended)
        if queue_json is not None and not batch_keys and len(slots) == len(messages):
            # the common publish: every message new, into one queue, no key to remember
            self._after_append(incoming, len(messages))
            return wire.results_json(queue_json, appended.positions, appended.offsets)
        results = self._results(appended)
        for key, index in batch_keys.items():
            self.dedup.put(key, appended.timestamp, results[index])
        self._after_append(incoming, len(messages))
        if len(results) == len(slots):  # the common case: no duplicates at all
            return b"[%b]" % b",".join(results)
        out_results: list[bytes] = []
        for slot_index, s in enumerate(slots):
            if isinstance(s, bytes):
                out_results.append(s)
            elif slot_index in duplicates_in_batch:
                out_results.append(as_duplicate(results[s]))
            else:
                out_results.append(results[s])
        return b"[%b]" % b",".join(out_results)

    def _publish_one(
        self, exchange: Exchange, target: Queue | None, routing_key: str, data: bytes, binary_answer: bool = False,
        flags: int = 0,
    ) -> bytes | None:
        """A publish of one message with no tag, headers or key (its body text, or bytes: `flags`) that
        goes to exactly one queue, the single-message publish of nearly every producer: what the batch
        path does for it, without its per-batch columns, maps and loops (Store.publish_one). None for
        any other message, which the batch path publishes."""
        max_bytes = self.settings.max_message_bytes
        if len(data) > max_bytes:
            raise TooLarge(f"messages[0] is larger than {max_bytes} bytes", code=codes.MESSAGE_TOO_LARGE)
        if target is None:
            ids = self._targets(exchange, None, routing_key, NO_HEADERS)
            if len(ids) != 1:
                return None
            target = self.queues_by_id[ids[0]]
        q = target
        exchange.messages_in += 1
        disk = self.disk
        try:
            position, offset = self.store.publish_one(data, q.id, self._cap(q), disk.admit if disk.limit else None,
                                                      flags)
        except (QueueCapReached, StoreFull) as exc:
            raise self._refusal(exc) from exc
        disk.failure = None
        self._arrived(q, 1)
        self.stats.published.add(1)
        if binary_answer:
            return render_results(AppendedBatch(0, [position], [q.id], [offset]), {q.id: q.name.encode()})
        return wire.results_json(q.name_json, [position], [offset])

    def _publish_delayed(self, exchange: Exchange, target: Queue | None, raw: list[Any], mandatory: bool) -> bytes:
        """A JSON batch of which some message asks for a delay (app/broker/scheduling.py): every
        message is stored at once as a delayed record (those without a delay are due now) and enters
        its queues when due. Results name the queues with offset null and give `deliver_at_ms`."""
        now = now_ms()
        plain: list[Any] = []
        dues: list[int] = []
        for i, message in enumerate(raw):
            due = parse_delay(message, i, now) if type(message) is dict else None
            if type(message) is dict:
                if "idempotency_key" in message:
                    raise InvalidInput(f"messages[{i}].idempotency_key cannot be used in a batch with delayed messages")
                message = {k: v for k, v in message.items() if k not in DELAY_FIELDS}
            plain.append(message)
            dues.append(now if due is None else due)
        batch = parse_batch(plain, exchange.name, self.message_limits)
        max_bytes = self.settings.max_message_bytes
        data: list[bytes] = []
        tags: list[bytes] = []
        flags: list[int] = []
        targets: list[tuple[int, ...]] = []
        for i, (routing_key, blob) in enumerate(zip(batch.routing_keys, batch.blobs, strict=True)):
            if len(blob) > max_bytes:
                raise TooLarge(f"messages[{i}] is larger than {max_bytes} bytes", code=codes.MESSAGE_TOO_LARGE)
            out = batch.full.get(i) if batch.full else None
            ids = self._targets(exchange, target, routing_key, out.headers if out is not None else NO_HEADERS)
            targets.append(ids)
            data.append(encode_delayed(dues[i], ids, blob))
            tags.append(out.tag.encode() if out is not None and out.tag else b"")
            flags.append((out.flags if out is not None else 0) | FLAG_DELAYED)
        exchange.messages_in += len(data)
        unroutable = sum(1 for ids in targets if not ids)
        if unroutable:
            exchange.messages_unroutable += unroutable
            if mandatory:
                raise Unroutable(f"{unroutable} message(s) of a mandatory publish matched no queue")
        columns = MessageColumns(data, [()] * len(data), tags if any(tags) else None, None, flags)
        disk = self.disk
        try:
            appended = self.store.append(columns, None, disk.admit if disk.limit else None)
        except StoreFull as exc:
            raise self._refusal(exc) from exc
        disk.failure = None
        by_id = self.queues_by_id
        results: list[bytes] = []
        for ids, due, position in zip(targets, dues, appended.positions, strict=True):
            routed = b",".join(b'{"queue":%b,"offset":null}' % by_id[q].name_json for q in ids)
            results.append(b'{"id":"%016x","routed":[%b],"duplicate":false,"deliver_at_ms":%d}' % (
                position, routed, due))
            for q in ids:
                self.schedule.add(q, due, position)
        self.stats.published.add(len(data))
        self.schedule_wake.set()
        return b"[%b]" % b",".join(results)

    def deliver_due(self, now: int) -> int:
        """Copy every delayed message due by `now` (epoch ms) into its queue: a new offset each."""
        due = self.schedule.take_due(now)
        if not due:
            return 0
        data: list[bytes] = []
        queues: list[tuple[int, ...]] = []
        tags: list[bytes] = []
        flags: list[int] = []
        size = 0
        incoming: dict[int, int] = {}
        try:
            for queue_id, entries in due.items():
                if queue_id not in self.queues_by_id:
                    continue
                for _, position in entries:
                    try:
                        record = self.store.read_at(position)
                    except KeyError:
                        log.error("schedule: delayed record at %d of queue %d is gone", position, queue_id)
                        continue
                    blob = decode_delayed(record.data)[2]
                    data.append(blob)
                    queues.append((queue_id,))
                    tags.append(record.tag)
                    flags.append(record.flags & ~FLAG_DELAYED)
                    incoming[queue_id] = incoming.get(queue_id, 0) + 1
                    size += len(blob)
                    if size > 4 << 20 or len(data) >= 10_000:
                        self._append_due(data, queues, tags, flags)
                        data, queues, tags, flags, size = [], [], [], [], 0
            if data:
                self._append_due(data, queues, tags, flags)
        except StoreFull:  # the log refused copies: every one of this round is due again next round
            log.warning("schedule: the disk is full; delayed messages wait for room")
            self.schedule.put_back(due)  # (copies already appended come twice: at-least-once)
            for queue_id in incoming:
                self.queues_by_id[queue_id].notify()
            return 0
        for queue_id, added in incoming.items():
            self._arrived(self.queues_by_id[queue_id], added)
        return sum(incoming.values())

    def _append_due(self, data: list[bytes], queues: list[tuple[int, ...]], tags: list[bytes],
                    flags: list[int]) -> None:
        """Due copies, without caps or the disk budget: the messages were accepted at their publish."""
        self.store.append(MessageColumns(data, queues, tags if any(tags) else None, None,
                                         flags if any(flags) else None))

    async def run_schedule(self) -> None:
        """Deliver delayed messages as they fall due: wake at the nearest due time, or when a
        publish schedules one (it may be nearer)."""
        wake = self.schedule_wake
        while True:
            try:
                self.deliver_due(now_ms())
            except Exception:
                log.exception("delivering delayed messages failed")
            nearest = self.schedule.next_due()
            # at least SCHEDULE_TICK_MS apart: a steady stream of due messages is copied in batches
            wait = 1.0 if nearest is None else min(1.0, max(SCHEDULE_TICK_MS / 1000, (nearest - now_ms()) / 1000))
            wake.clear()
            if wait > 0:
                try:
                    await asyncio.wait_for(wake.wait(), wait)
                except TimeoutError:
                    pass

    async def flush_schedule(self) -> None:
        """Make the due indexes durable (scheduling.py): the watermarks once the copies up to them
        are fsynced in the log."""
        schedule = self.schedule
        if not schedule.indexes:
            return
        marks, end = schedule.watermarks(), self.store.end_position
        await asyncio.wrap_future(self.store.sync(end))
        schedule.flush(end, marks)

    def _refusal(self, exc: QueueCapReached | StoreFull) -> QueueFull | StorageFull:
        """The broker's error for a store's refusal of a publish."""
        if isinstance(exc, StoreFull):
            self.disk.failed(str(exc))
            return StorageFull(f"the disk is full; nothing of this batch was stored ({exc})")
        q = self.queues_by_id[exc.queue_id]
        if exc.unit == "messages":
            return QueueFull(f"queue {q.name!r} holds {exc.held} of at most {exc.limit} messages")
        return QueueFull(f"queue {q.name!r} would exceed its {exc.limit} bytes")

    def _after_append(self, incoming: dict[int, int], count: int) -> None:
        """After an append: queue counters, limits (drop_head), waiting consumers, stats."""
        for queue_id, added in incoming.items():
            self._arrived(self.queues_by_id[queue_id], added)
        self.stats.published.add(count)

    def _arrived(self, q: Queue, added: int) -> None:
        """`added` messages were appended to `q`: its counter, its limits (drop_head), its waiting consumers."""
        q.messages_in += added
        if q.settings.max_messages is not None or q.settings.max_bytes is not None:
            self.enforce_limits(q, by_age=False)
        q.notify()

    def _targets(
        self, exchange: Exchange, target: Queue | None, routing_key: str, headers: Mapping[str, str]
    ) -> tuple[int, ...]:
        """Ids of the queues a message goes to: the named queue, or what the exchange routes to."""
        if target is not None:
            return (target.id,)
        queues = self.queues
        names = self.routing.route(exchange, routing_key, headers, queues)
        return tuple(q.id for n in names if (q := queues.get(n)) is not None and q.producer_visible)

    def _one_queue(self, appended: AppendedBatch) -> bytes | None:
        """The name (as JSON) of the one queue every message of the batch went to, if they did."""
        queues = appended.queues
        if appended.counts is None and queues and queues.count(queues[0]) == len(queues):
            q = self.queues_by_id.get(queues[0])
            return q.name_json if q is not None else None
        return None

    def _results(self, appended: AppendedBatch) -> list[bytes]:
        """Every message's result, as _result renders it; the one-queue case without a join."""
        by_id = self.queues_by_id
        out: list[bytes] = []
        add = out.append
        name = self._one_queue(appended)
        if name is not None:
            # one queue for every message: one format per message, its name's JSON repeated
            template = (b'{"id":"%%016x","routed":[{"queue":%b,"offset":%%d}],"duplicate":false}'
                        % name.replace(b"%", b"%%"))
            return list(map(template.__mod__, zip(appended.positions, appended.offsets, strict=True)))
        for position, placed in zip(appended.positions, appended.placements, strict=True):
            if len(placed) == 1 and placed[0][0] in by_id:
                q, o = placed[0]
                add(b'{"id":"%016x","routed":[{"queue":%b,"offset":%d}],"duplicate":false}' % (
                    position, by_id[q].name_json, o))
            else:
                add(self._result(position, placed))
        return out

    def _result(self, position: int, placements: Iterable[tuple[int, int]]) -> bytes:
        """One message's result as JSON: {"id", "routed": [{"queue", "offset"}], "duplicate": false}."""
        by_id = self.queues_by_id
        routed = b",".join(
            [b'{"queue":%b,"offset":%d}' % (by_id[q].name_json, o) for q, o in placements if q in by_id]
        )
        return b'{"id":"%016x","routed":[%b],"duplicate":false}' % (position, routed)

    def _caps(self, incoming: dict[int, int]) -> dict[int, QueueCap] | None:
        """reject_publish: what each queue the batch goes to may hold (the store refuses the whole
        batch when any would go past it), counted as the queue's ``bytes`` counts: each record's whole
        size on disk."""
        caps = None
        for queue_id in incoming:
            cap = self._cap(self.queues_by_id[queue_id])
            if cap is not None:
                caps = caps or {}
                caps[queue_id] = cap
        return caps

    @staticmethod
    def _cap(queue: Queue) -> QueueCap | None:
        """What `queue` may hold when it refuses publishes past its limits (reject_publish)."""
        s = queue.settings
        if s.overflow is Overflow.REJECT_PUBLISH and (s.max_messages is not None or s.max_bytes is not None):
            return QueueCap(s.max_messages, s.max_bytes)
        return None

    # ------------------------------------------------------------------ limits

    def enforce_limits(self, queue: Queue, *, by_age: bool = True) -> int:
        """drop_head: move the queue's first offset up until it is within its limits.

        Publishes pass by_age=False: finding the age boundary is a binary search over the log, and
        the retention pass (every few seconds) applies age limits anyway."""
        s = queue.settings
        store = self.store
        first, end = store.first_offset(queue.id), store.next_offset(queue.id)
        new_first = first
        cause = ""
        if s.max_messages is not None and end - new_first > s.max_messages:
            new_first, cause = end - s.max_messages, "max_messages"
        max_age = (s.max_age_seconds or self.settings.default_max_age_seconds) if by_age else 0
        if max_age and first < end:
            aged = store.offset_for_timestamp(queue.id, now_ms() - max_age * 1000)
            if aged > new_first:
                new_first, cause = aged, "max_age_seconds"
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
                if offset > new_first:
                    new_first, cause = offset, "max_bytes"
        if new_first <= first:
            return 0
        dropped_messages = store.read(queue.id, first, new_first - first) if s.dead_letter_exchange is not None else []
        dropped, _ = store.set_first_offset(queue.id, new_first)
        self.count_dropped(queue, dropped, cause)
        if dropped_messages:
            self.dead_letter(queue, dropped_messages, reason="maxlen", group=None, delivery_counts=None)
        return dropped
