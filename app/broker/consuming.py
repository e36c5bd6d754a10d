"""Consuming: consumer groups, pull/ack/nack/seek, redelivery, floors written behind, retention."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from chunkmq.broker.base import BrokerBase, log, now_ms, one_at_a_time
from chunkmq.broker.binary_page import render_page
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from chunkmq.broker.expiry import Expiry
from chunkmq.broker.fields import MAX_INT, boolean, non_negative_int, reject_unknown
from chunkmq.broker.group import Group, monotonic_ms
from chunkmq.broker.message import position_of, render_all, render_binary, render_one
from chunkmq.broker.names import check_name
from chunkmq.broker.pausing import parse_pause
from chunkmq.broker.queue import Queue
from chunkmq.broker.wake import Wake
from chunkmq.meta import GroupState
from chunkmq.storage import StoredMessage
from chunkmq.wire import codes


class Consuming(BrokerBase):
    # ------------------------------------------------------------------ consumer groups

    def group(self, queue: Queue, name: str) -> Group:
        group = queue.groups.get(name)
        if group is None:
            raise NotFound(f"group {name!r} not found on queue {queue.name!r}", code=codes.GROUP_NOT_FOUND)
        return group

    def _start_offset(self, queue: Queue, start: str) -> int:
        if start == "latest":
            return self.store.next_offset(queue.id)
        return self.store.first_offset(queue.id)

    async def declare_group(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> tuple[Group, bool]:
        queue = self.queue(queue_name)
        start, tag_filter, single = parse_group(group_name, body)
        existing = queue.groups.get(group_name)
        if existing is not None:
            new_filter = "tag_filter" in body and existing.tag_filter != tag_filter
            new_single = single is not None and single != existing.single_active_consumer
            if new_filter or new_single:
                await asyncio.to_thread(
                    self.meta.upsert_group, queue.id, group_name, start=start,
                    tag_filter=tag_filter if "tag_filter" in body else existing.tag_filter,
                    single_active_consumer=single,
                )
                if new_filter:
                    existing.set_tag_filter(tag_filter)
                if new_single:
                    self._set_single_active(queue, existing, bool(single))
            return existing, False
        return await self._create_group(queue, group_name, start, tag_filter, bool(single)), True

    def _set_single_active(self, queue: Queue, group: Group, on: bool) -> None:
        group.single_active_consumer = on
        if on:
            self.active_groups.add(group)
        else:
            self.active_groups.discard(group)
            group.attached.active = None
        queue.notify()  # the consumers that waited their turn may all receive now

    async def _create_group(self, queue: Queue, name: str, start: str, tag_filter: tuple[str, ...] | None,
                            single_active_consumer: bool = False) -> Group:
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
                self.meta.upsert_group, queue.id, name, start=start, tag_filter=tag_filter, ack_floor=offset,
                single_active_consumer=single_active_consumer,
            )
            group = queue.groups.get(name)
            if group is None:
                group = Group(queue.id, name, next_offset=offset, committed_floor=offset, tag_filter=tag_filter,
                              tracker=self.group_changes)
                queue.groups[name] = group
                if single_active_consumer:
                    self._set_single_active(queue, group, True)
                self.group_changes.touch_queue(queue.id)  # its floor may be lower than the queue's was
            future.set_result(group)
            return group
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a failure nobody else awaited is not logged twice
            raise
        finally:
            del self._creating[key]

    @one_at_a_time
    async def delete_group(self, queue_name: str, group_name: str) -> None:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        await asyncio.to_thread(self.meta.delete_group, queue.id, group_name)
        queue.groups.pop(group_name, None)
        self.active_groups.discard(group)
        self.group_changes.touch_queue(queue.id)  # its floor may have held the queue's back
        self.history.forget(queue.id, group_name)
        group.close()
        queue.notify()

    async def consumer_group(self, queue_name: str, group_name: str) -> tuple[Queue, Group]:
        """The queue and group a consumer (pull or stream) reads from: refused while the queue is
        retired from consumers; the group is created at `earliest` when it does not exist yet."""
        queue = self.queue(queue_name)
        if not queue.consumer_visible:
            raise PreconditionFailed(f"queue {queue_name!r} is not visible to consumers")
        check_name(group_name, "group name")
        group = queue.groups.get(group_name) or await self._create_group(queue, group_name, "earliest", None)
        return queue, group

    async def pull(
        self, queue_name: str, group_name: str, max_messages: int, wait_ms: int, consumer: str,
        *, binary: bool = False,
    ) -> bytes:
        """Deliver up to max_messages; waits up to wait_ms for a publish (or a redelivery) when
        nothing is ready. A publish wakes the wait at once: no polling. The answer is the JSON
        `{"messages": [...]}`, or with `binary` a binary batch (render_binary)."""
        queue, group = await self.consumer_group(queue_name, group_name)
        if self.cold:
            await self.warm(queue, group.next_offset, max_messages)
        if group.single_active_consumer:  # attached while it waits, then for a lease (app/broker/active.py)
            group.attached.attach(consumer)
            try:
                return await self._pull(queue, group, max_messages, wait_ms, consumer, binary)
            finally:
                group.attached.detach(consumer, monotonic_ms() + self.lease_ms)
        return await self._pull(queue, group, max_messages, wait_ms, consumer, binary)

    @property
    def lease_ms(self) -> int:
        """How long a pulling consumer of a single-active-consumer group keeps its place after a pull."""
        return round(self.settings.ws_ping_timeout * 1000)

    async def _pull(self, queue: Queue, group: Group, max_messages: int, wait_ms: int, consumer: str,
                    binary: bool) -> bytes:
        queue_name, group_name = queue.name, group.name
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            delivered = self.deliver(queue, group, consumer, max_messages, binary=binary)
            remaining = deadline - time.monotonic()
            if delivered or remaining <= 0:
                break
            if self.queues.get(queue.name) is not queue:  # deleted while this pull waited
                raise NotFound(f"queue {queue_name!r} was deleted", code=codes.QUEUE_NOT_FOUND)
            if group.closed:
                raise NotFound(f"group {group_name!r} was deleted", code=codes.GROUP_NOT_FOUND)
            delivered = await self._woken(queue, group, consumer, max_messages, binary, remaining)
            if delivered:
                break
        if binary:
            return delivered[0] if delivered else render_binary([])
        return b'{"messages":[%b]}' % b",".join(delivered)

    def _woken(self, queue: Queue, group: Group, consumer: str, max_messages: int, binary: bool,
               seconds: float) -> Wake:
        """A wait of up to `seconds` for the queue's next notify (a publish, a nack, a seek, due
        redeliveries): the pull's messages are taken inside that notify, before the publish answers,
        and the wait ends with them ([] at the timeout, or when the notify had nothing for it: the
        pull looks again). No task and no asyncio.timeout: an eager pull waits on it outside any task
        (app/api/wake.py), and is resumed by the publish itself."""
        return _Waiting(self, queue, group, consumer, max_messages, binary, seconds).wake

    @property
    def cold(self) -> bool:
        """Whether some chunk is in the tier's bucket only (then reads that need it fetch it first)."""
        return bool(self.store.remote)

    async def warm(self, queue: Queue, offset: int | None, count: int) -> None:
        """Fetch, in a worker thread, the chunks in the bucket only that reading `count` messages of
        `queue` from `offset` (None: its first) needs: the read after it then finds them on local
        disk and does not fetch them on the event loop (which the store would do rather than miss a
        message)."""
        if self.store.remote:
            start = self.store.first_offset(queue.id) if offset is None else offset
            await asyncio.to_thread(self.store.warm, queue.id, start, count)

    async def warm_message(self, id_: str) -> None:
        """`warm` for the message with id `id_` (GET /api/v1/messages/{id}); nothing for a bad id."""
        try:
            position = position_of(id_)
        except NotFound:
            return
        if self.store.remote:
            await asyncio.to_thread(self.store.warm_position, position)

    def deliver(
        self, queue: Queue, group: Group, consumer: str, max_messages: int, *, binary: bool = False
    ) -> list[bytes]:
        """Hand out messages to one consumer, now in flight: rendered JSON objects, or with `binary`
        one binary batch of them (none delivered: an empty list)."""
        now = monotonic_ms()
        if (group.paused and group.is_paused()) or (
                group.single_active_consumer and not self._may_receive(queue, group, consumer, now)):
            group.seen(consumer)
            return []
        self._expire(queue, group, now)
        timeout = queue.settings.ack_timeout_ms
        expiry = Expiry(queue.settings.message_ttl_ms, now_ms())
        if binary:  # first deliveries read and rendered as columns: no object per message
            page = group.deliver_fresh(self.store, consumer, max_messages, timeout, now, expiry)
            if page is not None:
                self.stats.delivered.add(len(page))
                queue.delivered += len(page)
                return [render_page(page)]
        taken = group.deliver(self.store, consumer, max_messages, timeout, now, expiry)
        if expiry.expired:
            self._expired(queue, group, expiry.expired)
        if taken:
            self.stats.delivered.add(len(taken))
            queue.delivered += len(taken)
        if binary:  # one binary batch for all of them (render_binary), or nothing
            if len(taken) == 1:  # a stream's usual delivery at low rates: one message, one row
                (offset, position, ts, _, tag, data), count = taken[0]
                if (one := render_one(offset, position, ts, tag, data, count)) is not None:
                    return [one]
            return [render_binary([(offset, position, ts, tag, data, count)
                                   for (offset, position, ts, _, tag, data), count in taken])] if taken else []
        qj = queue.name_json
        return render_all(qj, taken)

    def _may_receive(self, queue: Queue, group: Group, consumer: str, now: int) -> bool:
        """Whether `consumer` is the active one of a single-active-consumer group (choosing it when
        none is); a consumer not attached (a plain pull) is attached by it."""
        attached = group.attached
        if consumer not in attached.attached(now):
            attached.touch(consumer, now + self.lease_ms)
        self._choose_active(queue, group, now)
        return attached.active == consumer

    def _choose_active(self, queue: Queue, group: Group, now: int) -> None:
        """Choose the active consumer; one that is gone leaves its in-flight messages to the next,
        ready at once and delivered ahead of new ones, and the next is woken for them."""
        gone = group.attached.choose(now)
        if gone is not None:
            group.release_consumer(gone, now)
            if group.attached.active is not None:
                log.info("group %r of queue %r: consumer %r is active (%r left)",
                         group.name, queue.name, group.attached.active, gone)
            queue.notify()

    def attach_consumer(self, queue: Queue, group: Group, consumer: str) -> Callable[[], None]:
        """A stream of `consumer` opened on the group; the answer detaches it (the stream ended):
        when it was the active one, the next takes over at once."""
        group.attached.attach(consumer)

        def detach() -> None:
            group.attached.detach(consumer)
            if group.single_active_consumer:
                self._choose_active(queue, group, monotonic_ms())

        return detach

    def _expired(self, queue: Queue, group: Group, expired: list[tuple[StoredMessage, int]]) -> None:
        """Messages the group passed as expired (done, as if acked): dead-lettered with reason
        `expired` when the queue has a dead-letter exchange, and counted."""
        if queue.settings.dead_letter_exchange is not None:
            self.dead_letter(queue, [m for m, _ in expired], reason="expired", group=group.name,
                             delivery_counts={m[0]: count for m, count in expired})
        queue.expired += len(expired)
        self.stats.expired += len(expired)

    def _expire(self, queue: Queue, group: Group, now: int) -> None:
        exhausted = group.expire(now, queue.settings.max_deliveries)
        if exhausted:
            self._dead_letter_offsets(queue, group, exhausted)

    def _dead_letter_offsets(
        self, queue: Queue, group: Group, exhausted: list[tuple[int, int]], reason: str = "delivery_limit"
    ) -> None:
        """Messages past max_deliveries (or rejected): to the dead-letter exchange, or dropped and counted."""
        counts = dict(exhausted)
        # a read of one at `offset` gives the next message there or after: keep it only if it is that one
        stored = [m for offset in sorted(counts) for m in self.store.read(queue.id, offset, 1) if m[0] == offset]
        if queue.settings.dead_letter_exchange is not None:
            self.dead_letter(queue, stored, reason=reason, group=group.name, delivery_counts=counts)
        else:
            queue.messages_dropped += len(stored)
            self.dropped_changed.add(queue)
            self.stats.dropped += len(stored)

    def ack(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        reject_unknown(body, ("offsets", "up_to"))
        if "up_to" in body:
            if "offsets" in body:
                raise InvalidInput("give offsets or up_to, not both")
            up_to = non_negative_int(body, "up_to")
            if up_to > group.next_offset:  # would skip messages never delivered: that is what seek is for
                raise InvalidInput(
                    f"up_to {up_to} is beyond what group {group.name!r} has delivered (up to offset "
                    f"{group.next_offset}); use seek to skip messages", code=codes.INVALID_ACK)
            acked = group.ack_up_to(up_to, self.store.next_offset(queue.id))
            unknown: list[int] = []
        else:
            offsets = _offsets(body)
            acked, unknown = group.ack(offsets)
        self.stats.acked.add(acked)
        group.acked += acked
        return {"ack_floor": group.ack_floor, "acked": acked, "not_in_flight": unknown}

    def nack(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Give messages back: redelivered after `delay_ms`, or with `requeue: false` rejected at once
        (AMQP's reject): dead-lettered, or dropped and counted without a dead-letter exchange."""
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        reject_unknown(body, ("offsets", "delay_ms", "requeue"))
        offsets = _offsets(body)
        delay = body.get("delay_ms", 0)
        if type(delay) is not int or not 0 <= delay <= 24 * 3600 * 1000:
            raise InvalidInput("delay_ms must be an integer from 0 to 86400000")
        requeue = boolean(body, "requeue", True)
        # Without requeue every message is "past its delivery limit" at once: max_deliveries 0.
        limit = queue.settings.max_deliveries if requeue else 0
        unknown, exhausted = group.nack(offsets, delay, monotonic_ms(), limit)
        if exhausted:
            self._dead_letter_offsets(queue, group, exhausted, "delivery_limit" if requeue else "rejected")
        if delay == 0:
            queue.notify()
        return {"ack_floor": group.ack_floor, "nacked": len(offsets) - len(unknown), "not_in_flight": unknown,
                "exhausted": len(exhausted)}  # past max_deliveries: dead-lettered, or dropped

    def seek(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> Group:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        first, end = self.store.first_offset(queue.id), self.store.next_offset(queue.id)
        reject_unknown(body, ("to", "offset", "timestamp"))
        if len(body) != 1:
            raise InvalidInput('give exactly one of to ("earliest" or "latest"), offset, timestamp')
        if "to" in body:
            if body["to"] not in ("earliest", "latest"):
                raise InvalidInput("to must be earliest or latest")
            offset = first if body["to"] == "earliest" else end
        elif "offset" in body:
            offset = min(max(non_negative_int(body, "offset"), first), end)
        else:
            offset = self.store.offset_for_timestamp(queue.id, non_negative_int(body, "timestamp"))
        group.seek(offset)
        queue.notify()
        return group

    # ------------------------------------------------------------------ background work

    @one_at_a_time
    async def pause_group(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> Group:
        """Pause a group until resumed, or until `until_ms`: written before the answer, so it stays
        paused across a restart or a crash. Its consumers stay attached and receive nothing."""
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        until = parse_pause(body, now_ms())
        await asyncio.to_thread(self.meta.set_group_pause, queue.id, group.name, True, until)
        group.pause(until)
        self.pause_timers.add(group)
        return group

    @one_at_a_time
    async def resume_group(self, queue_name: str, group_name: str, body: Mapping[str, Any]) -> Group:
        queue = self.queue(queue_name)
        group = self.group(queue, group_name)
        reject_unknown(body, ())
        await asyncio.to_thread(self.meta.set_group_pause, queue.id, group.name, False)
        group.resume()
        queue.notify()
        return group

    def sweep(self) -> None:
        """Expire ack deadlines and wake consumers whose redeliveries are due (every ~100 ms). Only the
        groups with a deadline or a redelivery ahead are visited (GroupChanges.timed). Timed pauses
        that ended and pull leases of single-active-consumer groups that ran out are handled here too."""
        now = monotonic_ms()
        for group in self.pause_timers.due(now_ms()):
            if (resumed := self.queues_by_id.get(group.queue_id)) is not None:
                resumed.notify()
        for group in list(self.active_groups):
            owner = self.queues_by_id.get(group.queue_id)
            if owner is None or group.closed or owner.groups.get(group.name) is not group:
                self.active_groups.discard(group)  # its queue or the group was deleted
            else:
                self._choose_active(owner, group, now)
        timed = self.group_changes.timed
        due: set[Queue] = set()
        for group in list(timed):
            ready = group.next_ready()
            queue = self.queues_by_id.get(group.queue_id)
            if ready is None or group.closed or queue is None or queue.groups.get(group.name) is not group:
                timed.discard(group)  # nothing ahead (a later delivery adds it again), or gone
            elif ready <= now:
                self._expire(queue, group, now)
                due.add(queue)
        for queue in due:
            queue.notify()

    def forget_idle_consumers(self) -> None:
        """Drop consumers unseen for CONSUMER_FORGET_MS from every group's list (a background job)."""
        epoch = now_ms()
        for queue in list(self.queues.values()):
            for group in list(queue.groups.values()):
                if group.consumers:
                    group.forget_idle_consumers(epoch)

    def retention_floors(self, queues: Iterable[Queue] | None = None) -> dict[int, int]:
        """Per queue (of `queues`, default all), the offset below which no group needs its messages
        (EQueue: delete only what every consumer is done with). Queues without groups keep everything
        from their first offset."""
        floors: dict[int, int] = {}
        for queue in self.queues.values() if queues is None else queues:
            first = self.store.first_offset(queue.id)
            if queue.groups:
                floors[queue.id] = max(first, min(g.ack_floor for g in queue.groups.values()))
            else:
                floors[queue.id] = first
        return floors

    def _age_check(self, queue: Queue) -> None:
        """Schedule the retention round at which the queue's oldest message reaches its age limit."""
        max_age = queue.settings.max_age_seconds or self.settings.default_max_age_seconds
        first = self.store.first_offset(queue.id)
        if not max_age or first >= self.store.next_offset(queue.id):
            self.aging_at.pop(queue.id, None)
            return
        due = (self.store.timestamp_of(queue.id, first) or 0) + max_age * 1000
        if self.aging_at.get(queue.id) == due:
            return
        self.aging_at[queue.id] = due
        heapq.heappush(self.aging, (due, queue.id))
        if len(self.aging) > 2 * len(self.aging_at) + 64:  # stale entries of earlier checks: drop them
            self.aging = [(t, q) for q, t in self.aging_at.items()]
            heapq.heapify(self.aging)

    async def acks_durable(self) -> None:
        """Return once every ack applied so far survives a crash (fsync=always); at once otherwise,
        where group state is written behind (at most GROUP_COMMIT_SECONDS old after a crash)."""
        if self.durability == "fsync":
            await self.committer.durable()

    async def commit_groups(self) -> int:
        """Write the state of every changed group, and changed loss counters, in one transaction,
        once the log is fsynced up to where they point. Returns the number of groups written."""
        touched, touched_queues = self.group_changes.take_groups(), self.dropped_changed
        self.dropped_changed = set()
        changed = [
            (group, group.changes, group.state())
            for group in touched
            if group.changes != group.committed_changes and not group.closed
            and (queue := self.queues_by_id.get(group.queue_id)) is not None and queue.groups.get(group.name) is group
        ]
        dropped = [(q, q.messages_dropped) for q in touched_queues
                   if q.messages_dropped != q.committed_dropped and self.queues_by_id.get(q.id) is q]
        if not changed and not dropped:
            return 0
        try:
            return await self._commit_groups(changed, dropped)
        except BaseException:
            self.group_changes.groups |= {group for group, _, _ in changed}  # the next round writes them
            self.dropped_changed |= {queue for queue, _ in dropped}
            raise

    async def _commit_groups(self, changed: list[tuple[Group, int, tuple[int, int, tuple[tuple[int, int], ...]]]],
                             dropped: list[tuple[Queue, int]]) -> int:
        states = [
            GroupState(group.queue_id, group.name, floor, next_offset, done, group.missed)
            for group, _, (floor, next_offset, done) in changed
        ]
        # Every position these states cover is below the log's end now: make it durable first, so a
        # saved position never covers a message a crash of the machine could take back (and dead-
        # lettered copies are on disk before their originals count as done).
        await asyncio.wrap_future(self.store.sync(self.store.end_position))
        await asyncio.to_thread(self.meta.save_group_states, states, [(q.id, n) for q, n in dropped])
        for (group, mark, (floor, _, _)) in changed:
            group.committed_changes = mark
            group.committed_floor = floor
        for queue, count in dropped:
            queue.committed_dropped = count
        return len(states)

    async def run_retention(self) -> None:
        """Apply limits, delete what no group needs (and, under the drop_oldest disk budget policy,
        the oldest chunks until the data directory is under the budget); count and warn about every
        message deleted before its groups consumed it."""
        # Only the queues where something changed: appended to or trimmed, a group's floor moved, the
        # settings or the groups changed, or the oldest message reached its age limit.
        now = now_ms()
        due = self.store.changed_queues("retention") | self.retention_due
        moved = self.group_changes.take_queues("retention")
        due |= set(self.queues_by_id) if moved is None else moved
        self.retention_due = set()
        aging = self.aging
        while aging and aging[0][0] <= now:
            t, queue_id = heapq.heappop(aging)
            if self.aging_at.get(queue_id) == t:
                del self.aging_at[queue_id]
                due.add(queue_id)
        queues = [queue for q in due if (queue := self.queues_by_id.get(q)) is not None]
        for queue in queues:
            self.enforce_limits(queue)
            self._age_check(queue)
        floors = self.retention_floors(queues)
        report = await asyncio.to_thread(self.store.retain, floors, free_bytes=self.disk.excess())
        self.stats.retention_freed_bytes += report.bytes_freed
        self.stats.retention_deleted_chunks += len(report.chunks_deleted)
        for queue_id, (messages, _) in report.dropped.items():
            queue = self.queues_by_id.get(queue_id)
            if queue is not None and messages:
                self.count_dropped(queue, messages, "the disk budget (drop_oldest)")
        for queue_id in report.first_offsets.keys() - report.dropped.keys():
            queue = self.queues_by_id.get(queue_id)
            for group in queue.groups.values() if queue is not None else ():
                group.catch_up(self.store)
        self.warn_losses()
        if report.chunks_deleted:
            log.info("retention deleted chunks %s, freed %d bytes", report.chunks_deleted, report.bytes_freed)
        if report.bytes_freed:
            self.disk.freed()
            await self.disk.measure()  # publishes refused by the budget may go again at once


class _Waiting:
    """A pull's wait (Consuming._woken). Once a notify or the timer ends it, it lets go of its pusher
    and its timer: no reference cycle outlives a long poll. Closures that call each other would each
    leave one, garbage only the collector frees: at thousands of polls a second, a collection of
    some 100,000 objects every few seconds, a pause of tens of milliseconds for every request."""

    __slots__ = ("binary", "broker", "consumer", "group", "max_messages", "queue", "stop", "timer", "wake")

    def __init__(self, broker: Consuming, queue: Queue, group: Group, consumer: str, max_messages: int,
                 binary: bool, seconds: float) -> None:
        self.broker, self.queue, self.group, self.consumer = broker, queue, group, consumer
        self.max_messages, self.binary = max_messages, binary
        self.wake = Wake()
        self.stop: Callable[[], None] | None = queue.push_to(self.push)
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(seconds, self.timeout)

    def _end(self) -> None:
        stop, timer, self.stop, self.timer = self.stop, self.timer, None, None
        if stop is not None:
            stop()
        if timer is not None:
            timer.cancel()

    def push(self) -> None:
        self._end()
        wake = self.wake
        if wake.done():  # cancelled
            return
        try:
            delivered = self.broker.deliver(self.queue, self.group, self.consumer, self.max_messages,
                                            binary=self.binary)
        except Exception as exc:  # the pull's error, not the publish's
            wake.fail(exc)
            return
        wake.fire(delivered)

    def timeout(self) -> None:
        self._end()
        self.wake.fire([])


def parse_group(name: str, body: Mapping[str, Any]) -> tuple[str, tuple[str, ...] | None, bool | None]:
    """Validate a group declare (PUT /queues/{q}/groups/{name}): its (start, tag filter, single active
    consumer: None when not given)."""
    check_name(name, "group name")
    reject_unknown(body, ("start", "tag_filter", "single_active_consumer"))
    single = body.get("single_active_consumer")
    if single is not None and type(single) is not bool:
        raise InvalidInput("single_active_consumer must be true or false")
    start = body.get("start", "earliest")
    if start not in ("earliest", "latest"):
        raise InvalidInput("start must be earliest or latest")
    tags = body.get("tag_filter")
    if tags is not None and (
        type(tags) is not list or not all(type(t) is str and 0 < len(t) <= 255 for t in tags)
    ):
        raise InvalidInput("tag_filter must be a list of tags (strings of 1-255 characters) or null")
    if tags == []:  # a group that matches nothing would never receive a message and report lag 0
        raise InvalidInput("tag_filter must name at least one tag, or be null for every message")
    return start, tuple(tags) if tags is not None else None, single


def _offsets(body: Mapping[str, Any]) -> list[int]:
    offsets = body.get("offsets")
    if type(offsets) is not list or not offsets or len(offsets) > 100_000:
        raise InvalidInput("offsets must be a non-empty list of offsets")
    if not all(type(o) is int for o in offsets) or min(offsets) < 0 or max(offsets) > MAX_INT:
        raise InvalidInput("offsets must be non-negative integers")
    return offsets
