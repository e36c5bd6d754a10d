"""What every part of the broker shares: its state, the lookups, and dead-lettering.

The Broker class is assembled from parts that each own one concern (see broker.py); this base
declares the state they all use. Threading: everything runs on the event loop thread, which is the
one writer of this state.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from chunkmq.broker.committer import Committer
from chunkmq.broker.dedup import IdempotencyWindow
from chunkmq.broker.disk import DiskGuard
from chunkmq.broker.errors import NotFound
from chunkmq.broker.expiry import EXPIRES_HEADER
from chunkmq.broker.group import Group, GroupChanges
from chunkmq.broker.group import now_ms as now_ms  # re-exported: the broker's parts take it from here
from chunkmq.broker.message import UNBOUNDED, MessageLimits, decode_data, parse_message
from chunkmq.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS
from chunkmq.broker.pausing import PauseTimers
from chunkmq.broker.queue import Queue
from chunkmq.broker.routing import Exchange, RoutingTable
from chunkmq.broker.scheduling import Schedule
from chunkmq.broker.stats import BrokerStats
from chunkmq.config import Settings
from chunkmq.storage import NewMessage, Store, StoredMessage
from chunkmq.wire import codes

if TYPE_CHECKING:
    from chunkmq.broker.history import History
    from chunkmq.meta import MetaStore

log = logging.getLogger("chunkmq.broker")

_P = ParamSpec("_P")
_R = TypeVar("_R")
_B = TypeVar("_B", bound="BrokerBase")


def one_at_a_time(
    method: Callable[Concatenate[_B, _P], Awaitable[_R]],
) -> Callable[Concatenate[_B, _P], Awaitable[_R]]:
    """Run an admin operation (declare, delete, bind, ...) alone: each checks the in-memory state,
    writes the database in a worker thread, then updates the state, and two of them interleaved at
    the await saw stale state (two identical declares answered 500 from the unique constraint).
    Admin operations are rare and SQLite serializes writes anyway; publish and pull never wait here."""

    @functools.wraps(method)
    async def serialized(self: _B, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        async with self._admin:
            return await method(self, *args, **kwargs)

    return serialized


class BrokerBase:
    settings: Settings
    store: Store
    meta: MetaStore
    routing: RoutingTable
    queues: dict[str, Queue]
    queues_by_id: dict[int, Queue]
    dedup: IdempotencyWindow
    stats: BrokerStats
    history: History
    disk: DiskGuard
    durability: str
    committer: Committer
    group_changes: GroupChanges
    pause_timers: PauseTimers
    active_groups: set[Group]  # single-active-consumer groups
    dropped_changed: set[Queue]
    retention_due: set[int]
    aging: list[tuple[int, int]]
    aging_at: dict[int, int]
    message_limits: MessageLimits
    schedule: Schedule  # delayed messages (app/broker/scheduling.py)
    schedule_wake: asyncio.Event  # set when a publish schedules one
    _losses: dict[tuple[str, str], int]  # (queue, cause) -> messages deleted since the last warning
    _creating: dict[tuple[int, str], asyncio.Future[Group]]
    _admin: asyncio.Lock

    def exchange(self, name: str) -> Exchange:
        exchange = self.routing.exchanges.get(name)
        if exchange is None:
            raise NotFound(f"exchange {name!r} not found", code=codes.EXCHANGE_NOT_FOUND)
        return exchange

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"queue {name!r} not found", code=codes.QUEUE_NOT_FOUND)
        return queue

    def is_current(self, queue: Queue) -> bool:
        """False once `queue` was deleted (a new queue may have its name): a stream over it must end."""
        return self.queues.get(queue.name) is queue

    def count_dropped(self, queue: Queue, count: int, cause: str) -> None:
        """Messages deleted from a queue by a policy (limits, age, the drop_oldest disk budget): counted
        on the queue, and at once on every group that had not consumed them (its `missed`), not only
        when it next delivers. Warned about once per retention pass (`warn_losses`), not per publish."""
        queue.messages_dropped += count
        self.dropped_changed.add(queue)
        self.stats.dropped += count
        for group in queue.groups.values():
            group.catch_up(self.store)
        key = (queue.name, cause)
        self._losses[key] = self._losses.get(key, 0) + count

    def warn_losses(self) -> None:
        losses, self._losses = self._losses, {}
        for (queue, cause), count in sorted(losses.items()):
            log.warning("queue %r: %d messages deleted by %s", queue, count, cause)

    def dead_letter(
        self,
        queue: Queue,
        stored: list[StoredMessage],
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
        for offset, _, _, _, tag, data in stored:
            fields = decode_data(data, tag)
            headers = dict(fields.get("headers") or {})
            headers.pop(EXPIRES_HEADER, None)  # a dead letter does not expire with its original
            headers.update({
                "x-death-reason": reason,
                "x-death-queue": queue.name,
                "x-original-offset": str(offset),
                "x-original-exchange": fields.get("exchange", ""),
            })
            if group is not None:
                headers["x-death-group"] = group
            if delivery_counts is not None:
                headers["x-delivery-count"] = str(delivery_counts.get(offset, 0))
            routing_key = s.dead_letter_routing_key if s.dead_letter_routing_key is not None else fields["routing_key"]
            body = {"body_base64": fields["body_base64"]} if "body_base64" in fields else {"body": fields["body"]}
            out = parse_message(
                {"routing_key": routing_key, "headers": headers, "tag": fields.get("tag"), **body}, exchange.name, 0,
                UNBOUNDED,
            )
            names = self.routing.route(exchange, out.routing_key, out.headers, self.queues)
            targets = [self.queues[n] for n in names if n in self.queues and n != queue.name]
            tag = out.tag.encode() if out.tag else b""
            messages.append(NewMessage(out.data, [q.id for q in targets], tag, b"", out.flags))
        if not messages:
            return 0
        self.store.append(messages)
        routed = sum(1 for m in messages if m.queues)
        exchange.messages_in += len(messages)  # dead letters pass through their exchange as publishes do
        exchange.messages_unroutable += len(messages) - routed
        self.stats.dead_lettered += len(messages)
        queue.dead_lettered += len(messages)
        for m in messages:
            for queue_id in m.queues:
                target = self.queues_by_id[queue_id]
                target.messages_in += 1
                target.notify()
        return routed
