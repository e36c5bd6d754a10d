"""A consumer group on one queue: what it has been given, what is still in flight, what is done.

State and its invariants (all offsets are queue offsets):

- `next_offset`: every offset below it has been delivered at least once, or skipped by the tag
  filter, or skipped by a seek/cumulative ack. New deliveries start here.
- `in_flight`: offset -> (consumer, deadline, delivery count), for deliveries not yet acked.
- `pending`: offset -> (ready time, delivery count), for nacked or timed-out messages waiting to be
  delivered again. An offset is never in both.
- the ack floor is derived, not stored: min of in_flight, pending and next_offset. Everything below it
  is done. This is why no set of acked offsets is needed, and why skipping other tags moves the
  floor for free (EQueue counted skipped messages as lag; we do not).
- what is written to the database (`state()`): the floor, `next_offset`, and the offsets in between
  that are done (acked, or skipped by the tag filter) as ranges. After a crash the group restarts
  from it: everything in [floor, next_offset) not done is delivered again (at-least-once), nothing
  done is. `changes` counts state changes, so the writer knows which groups to write.

The group is owned by the event loop thread: no locks.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from chunkmq.broker.active import ActiveConsumers
from chunkmq.broker.expiry import Expiry
from chunkmq.storage import Store, StoredMessage, tag_hash
from chunkmq.storage.model import ColumnPage

CONSUMER_FORGET_MS = 5 * 60 * 1000  # a consumer unseen for this long leaves the consumer list
# Reading and rendering a page as columns costs about 200 µs whatever its size (some 200 numpy
# operations), the per-record path about 1.5 µs per message more: below this many it is the cheaper one.
COLUMNS_FROM = 200


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def now_ms() -> int:
    """Wall-clock epoch milliseconds (message timestamps, the history's points)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class InFlight:  # frozen: first deliveries of a batch share one (Group._track_fresh)
    consumer: str
    deadline: int  # monotonic ms
    count: int  # deliveries so far, this one included


@dataclass(slots=True)
class GroupChanges:
    """What a broker's groups changed since its rounds last looked, so that each round visits only
    those groups (the broker owns one and gives it to every group it holds)."""

    groups: set[Group] = field(default_factory=set)  # delivery state changed: the group commit writes them
    timed: set[Group] = field(default_factory=set)  # a redelivery or an ack deadline is due some time: the sweep
    # Per reader (retention, the overview's lagging groups): the ids of the queues whose groups'
    # floors may have moved, or that got or lost a group, since the reader's last take_queues.
    _queues: dict[str, set[int]] = field(default_factory=dict)
    _queue_sets: list[set[int]] = field(default_factory=list)

    def take_groups(self) -> set[Group]:
        groups, self.groups = self.groups, set()
        return groups

    def touch_queue(self, queue_id: int) -> None:
        for ids in self._queue_sets:
            ids.add(queue_id)

    def take_queues(self, reader: str) -> set[int] | None:
        """What changed since `reader`'s previous call; None on its first call (every queue)."""
        ids = self._queues.get(reader)
        self._queues[reader] = set()
        self._queue_sets = list(self._queues.values())
        return ids


@dataclass(eq=False, slots=True)
class Group:
    queue_id: int
    name: str
    next_offset: int
    tag_filter: tuple[str, ...] | None = None
    committed_floor: int = 0  # the floor last written to the database
    changes: int = 0  # bumped by every change of delivery state
    committed_changes: int = 0  # `changes` as last written
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)  # offset -> deliveries so far
    consumers: dict[str, int] = field(default_factory=dict)  # consumer id -> last seen (epoch ms)
    missed: int = 0  # messages lost to retention before this group consumed them
    expired: int = 0  # messages passed as expired since start (app/broker/expiry.py)
    acked: int = 0  # messages acknowledged since start (the history's ack rate)
    closed: bool = False
    # A paused group delivers nothing; a timed pause ends at paused_until_ms (epoch ms).
    paused: bool = False
    paused_until_ms: int | None = None
    single_active_consumer: bool = False
    attached: ActiveConsumers = field(default_factory=ActiveConsumers)  # streams, polls: who is active
    # heap of (deadline, offset) per redelivery, and (deadline, first offset, offsets) per pull's first
    # deliveries: one entry for the batch, not one per message
    _deadlines: list[tuple[Any, ...]] = field(default_factory=list)
    _ready: list[tuple[int, int]] = field(default_factory=list)  # heap of (ready time, offset)
    _tag_hashes: frozenset[int] | None = None
    _lag_cache: tuple[int, int, int] = (-1, -1, 0)  # (floor, end, lag) for filtered groups
    # A lower bound of ack_floor, for catch_up on every delivery: ack_floor takes the min of every
    # offset in flight (O(in flight) per delivery). The floor only rises (deliveries start at
    # next_offset, acks and catch_up remove, nacks and expiries keep the offset) except at seek and
    # restore, which set the bound anew.
    _floor_at_least: int = 0
    tracker: GroupChanges | None = None  # where changes are reported (the broker's)

    def __post_init__(self) -> None:
        self.set_tag_filter(self.tag_filter)

    def _changed(self) -> None:
        self.changes += 1
        tracker = self.tracker
        if tracker is not None:
            tracker.groups.add(self)
            tracker.touch_queue(self.queue_id)

    def seen(self, consumer: str) -> None:
        """Note a consumer's pull, delivered to or not (a paused group, a consumer that is not the
        active one: it stays listed). One the views did not list (new, or unseen for CONSUMER_FORGET_MS)
        is a change of its queue for the rounds that visit only what changed (history, alerts)."""
        now = time.time_ns() // 1_000_000
        before = self.consumers.get(consumer)
        self.consumers[consumer] = now
        if (before is None or now - before > CONSUMER_FORGET_MS) and self.tracker is not None:
            self.tracker.touch_queue(self.queue_id)

    def _timed(self) -> None:
        if self.tracker is not None:
            self.tracker.timed.add(self)

    # ---------------------------------------------------------------- derived state

    @property
    def ack_floor(self) -> int:
        floor = self.next_offset
        if self.in_flight:
            floor = min(floor, min(self.in_flight))
        if self.pending:
            floor = min(floor, min(self.pending))
        return floor

    def set_tag_filter(self, tags: tuple[str, ...] | None) -> None:
        self.tag_filter = tags
        self._tag_hashes = None if tags is None else frozenset(tag_hash(t.encode()) for t in tags)
        self._lag_cache = (-1, -1, 0)

    def lag_in(self, store: Store) -> int:
        """Messages this group still has to finish: unacked ones plus those not yet delivered."""
        end = store.next_offset(self.queue_id)
        floor = self.ack_floor
        if self._tag_hashes is None:
            return max(0, end - floor)
        cached_floor, cached_end, lag = self._lag_cache
        if (cached_floor, cached_end) == (floor, end):
            return lag
        lag = len(self.in_flight) + len(self.pending)
        offset = self.next_offset
        while offset < end:
            entries = store.index_entries(self.queue_id, offset, min(10_000, end - offset))
            if not entries:
                break
            lag += sum(1 for e in entries if e.tag_hash in self._tag_hashes)
            offset += len(entries)
        self._lag_cache = (floor, end, lag)
        return lag

    # ---------------------------------------------------------------- delivery

    def catch_up(self, store: Store) -> None:
        """Jump over messages that retention or limits removed, counting them as missed."""
        first = store.first_offset(self.queue_id)
        if first <= self._floor_at_least:
            return
        floor = self.ack_floor
        if floor >= first:
            self._floor_at_least = floor
            return
        self._changed()
        if self.next_offset < first:
            self.missed += first - self.next_offset
            self.next_offset = first
        for offset in [o for o in self.pending if o < first]:
            del self.pending[offset]
            self.missed += 1
        for offset in [o for o in self.in_flight if o < first]:
            del self.in_flight[offset]
            self.missed += 1
        self._floor_at_least = first  # nothing is left below it

    def expire(self, now: int, max_deliveries: int | None) -> list[tuple[int, int]]:
        """Move in-flight messages past their deadline to pending. Returns (offset, count) of those
        that used up their deliveries: the caller dead-letters them."""
        exhausted: list[tuple[int, int]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, first, *batch = heapq.heappop(heap)
            for offset in batch[0] if batch else (first,):
                entry = self.in_flight.get(offset)
                if entry is None or entry.deadline != deadline:
                    continue  # acked, nacked or redelivered since: a stale heap entry
                del self.in_flight[offset]
                self._changed()
                if max_deliveries is not None and entry.count >= max_deliveries:
                    exhausted.append((offset, entry.count))
                else:
                    self._make_pending(offset, entry.count, now)
        return exhausted

    def _make_pending(self, offset: int, count: int, ready: int) -> None:
        self.pending[offset] = count
        heapq.heappush(self._ready, (ready, offset))
        self._timed()

    def next_ready(self) -> int | None:
        """Monotonic ms at which a pending message or an in-flight deadline next needs attention."""
        times = [heap[0][0] for heap in (self._ready, self._deadlines) if heap]
        return min(times) if times else None

    def deliver(
        self, store: Store, consumer: str, max_messages: int, ack_timeout_ms: int, now: int,
        expiry: Expiry | None = None,
    ) -> list[tuple[StoredMessage, int]]:
        """Take up to max_messages: redeliveries first, then new messages in offset order.
        Returns (message, delivery count) pairs, now in flight for `consumer`. With `expiry`, expired
        messages are passed instead, as if acked (into expiry.expired, for the caller)."""
        self.seen(consumer)
        self.catch_up(store)
        scanned_from = self.next_offset
        out: list[tuple[StoredMessage, int]] = []
        passed = len(expiry.expired) if expiry is not None else 0
        deadline = now + ack_timeout_ms
        ready = self._ready
        while ready and len(out) < max_messages and ready[0][0] <= now:
            _, offset = heapq.heappop(ready)
            count = self.pending.pop(offset, None)
            if count is None:
                continue  # acked while pending
            stored = store.read(self.queue_id, offset, 1)
            if not stored or stored[0][0] != offset:
                self.missed += 1  # removed by retention meanwhile
                continue
            if expiry is not None and not expiry.keep(stored[:1], count):
                continue
            out.append((stored[0], count + 1))
            self._track(offset, consumer, deadline, count + 1)
        room = max_messages - len(out)
        end = store.next_offset(self.queue_id)
        while room > 0 and self.next_offset < end:
            start = self.next_offset
            if self._tag_hashes is None:
                fresh = store.read(self.queue_id, start, room)
                scanned_to = fresh[-1][0] + 1 if fresh else start
            else:
                fresh, scanned_to = store.read_matching(self.queue_id, start, room, self._tag_hashes)
            self.next_offset = max(start, scanned_to)
            read = len(fresh)
            if expiry is not None:
                fresh = expiry.keep(fresh, 0)
            if fresh:
                self._track_fresh([m[0] for m in fresh], consumer, deadline)
                out.extend(zip(fresh, itertools.repeat(1)))
                room -= len(fresh)
            if len(fresh) == read or self.next_offset == start:
                break  # read all it could (only expired messages skipped make it read on)
        if expiry is not None:
            self.expired += len(expiry.expired) - passed
        if out or self.next_offset != scanned_from or (expiry is not None and len(expiry.expired) > passed):
            self._changed()
        return out

    def deliver_fresh(
        self, store: Store, consumer: str, max_messages: int, ack_timeout_ms: int, now: int,
        expiry: Expiry | None = None,
    ) -> ColumnPage | None:
        """`deliver` as columns (Store.read_columns), for a pull of at least COLUMNS_FROM messages
        that are all first deliveries: no tag filter and no redelivery due. None when that does not
        hold or nothing is there; the caller then takes `deliver`, which also gives what it would."""
        end = store.next_offset(self.queue_id)
        if min(max_messages, end - self.next_offset) < COLUMNS_FROM:  # catch_up only makes it fewer
            return None
        ready = self._ready
        while ready and ready[0][1] not in self.pending:  # acked while pending: a stale entry
            heapq.heappop(ready)
        if self._tag_hashes is not None or (ready and ready[0][0] <= now):
            return None
        self.catch_up(store)
        if min(max_messages, end - self.next_offset) < COLUMNS_FROM:
            return None
        page = store.read_columns(self.queue_id, self.next_offset, max_messages)
        if not len(page) or (expiry is not None and expiry.may_hold_expired(page)):
            return None  # (`deliver` passes the expired ones)
        self.seen(consumer)
        offsets = page.offsets.tolist()
        self.next_offset = max(self.next_offset, offsets[-1] + 1)
        self._track_fresh(offsets, consumer, now + ack_timeout_ms)
        self._changed()
        return page

    def _track(self, offset: int, consumer: str, deadline: int, count: int) -> None:
        self.in_flight[offset] = InFlight(consumer, deadline, count)
        heapq.heappush(self._deadlines, (deadline, offset))
        self._timed()

    def _track_fresh(self, offsets: list[int], consumer: str, deadline: int) -> None:
        """First deliveries, with one deadline: one shared InFlight (entries are replaced, never
        changed) and one heap entry for all of them."""
        self.in_flight.update(zip(offsets, itertools.repeat(InFlight(consumer, deadline, 1))))
        heapq.heappush(self._deadlines, (deadline, offsets[0], offsets))
        self._timed()

    # ---------------------------------------------------------------- acknowledgements

    def ack(self, offsets: list[int]) -> tuple[int, list[int]]:
        """Per-offset ack. Returns (acked count, offsets that were not in flight or pending)."""
        acked, unknown = 0, []
        self._changed()
        for offset in offsets:
            if self.in_flight.pop(offset, None) is not None or self.pending.pop(offset, None) is not None:
                acked += 1
            else:
                unknown.append(offset)
        return acked, unknown

    def ack_up_to(self, up_to: int, end: int) -> int:
        """Cumulative ack: every offset below `up_to` is done (capped at the queue's end)."""
        up_to = min(up_to, end)
        self._changed()
        before = len(self.in_flight) + len(self.pending)
        if up_to >= self.next_offset:  # everything delivered (the usual cumulative ack): no scan
            self.in_flight, self.pending = {}, {}
            self._deadlines.clear()  # every entry is stale now
            self._ready.clear()
        if self.in_flight:
            self.in_flight = {o: e for o, e in self.in_flight.items() if o >= up_to}
        if self.pending:
            self.pending = {o: c for o, c in self.pending.items() if o >= up_to}
        self.next_offset = max(self.next_offset, up_to)
        return before - len(self.in_flight) - len(self.pending)

    def nack(self, offsets: list[int], delay_ms: int, now: int,
             max_deliveries: int | None) -> tuple[list[int], list[tuple[int, int]]]:
        """Give messages back for redelivery after delay_ms. Returns (unknown offsets, exhausted
        (offset, count) pairs for the caller to dead-letter)."""
        unknown: list[int] = []
        exhausted: list[tuple[int, int]] = []
        self._changed()
        for offset in offsets:
            entry = self.in_flight.pop(offset, None)
            if entry is None:
                unknown.append(offset)
            elif max_deliveries is not None and entry.count >= max_deliveries:
                exhausted.append((offset, entry.count))
            else:
                self._make_pending(offset, entry.count, now + delay_ms)
        return unknown, exhausted

    def release_consumer(self, consumer: str, now: int) -> int:
        """A consumer left cleanly asking for requeue: its in-flight messages are ready again now."""
        mine = [o for o, e in self.in_flight.items() if e.consumer == consumer]
        for offset in mine:
            entry = self.in_flight.pop(offset)
            self._make_pending(offset, entry.count, now)
        return len(mine)

    def seek(self, offset: int) -> None:
        """Move the group; everything in flight or pending is forgotten."""
        self._changed()
        self.in_flight.clear()
        self.pending.clear()
        self._deadlines.clear()
        self._ready.clear()
        self.next_offset = self._floor_at_least = offset  # nothing is left below it: the floor

    def pause(self, until_ms: int | None) -> None:
        self.paused, self.paused_until_ms = True, until_ms

    def resume(self) -> None:
        self.paused, self.paused_until_ms = False, None

    def is_paused(self) -> bool:
        """Paused now: a timed pause whose time has passed ends here, whoever looks first."""
        if not self.paused:
            return False
        until = self.paused_until_ms
        if until is not None and until <= now_ms():
            self.resume()
            return False
        return True

    def close(self) -> None:
        self.closed = True

    # ---------------------------------------------------------------- persistence

    def state(self) -> tuple[int, int, tuple[tuple[int, int], ...]]:
        """(floor, next_offset, done ranges): what a restart needs so that it redelivers every offset
        in [floor, next_offset) that is not done, and none that is. The undone offsets are exactly
        those in flight or pending (at most what was handed out and not acked), so the done ranges
        are the gaps between them."""
        undone = sorted(self.in_flight.keys() | self.pending.keys())
        end = self.next_offset
        if not undone:
            return end, end, ()
        done: list[tuple[int, int]] = []
        previous = undone[0]
        for offset in undone:
            if offset > previous:
                done.append((previous, offset))
            previous = offset + 1
        if previous < end:
            done.append((previous, end))
        return undone[0], end, tuple(done)

    def restore(self, next_offset: int, done: tuple[tuple[int, int], ...], now: int) -> None:
        """Take back a written state: every offset in [floor, next_offset) outside `done` is ready
        for redelivery now (delivered once already, as far as anyone knows)."""
        floor = self.next_offset
        self.next_offset = max(floor, next_offset)
        offset = floor
        for start, end in (*done, (self.next_offset, self.next_offset)):
            for undone in range(offset, min(start, self.next_offset)):
                self._make_pending(undone, 1, now)
            offset = max(offset, end)
        self.committed_floor = self._floor_at_least = self.ack_floor
        self.changes = self.committed_changes = 0

    def forget_idle_consumers(self, now_epoch_ms: int) -> None:
        """Drop consumers unseen for CONSUMER_FORGET_MS from the consumer list (the sweep calls this)."""
        idle = [c for c, seen in self.consumers.items() if now_epoch_ms - seen > CONSUMER_FORGET_MS]
        for consumer in idle:
            del self.consumers[consumer]
