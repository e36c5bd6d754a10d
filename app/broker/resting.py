"""Queue views for a round over queues (the alert evaluation), built again only where something
changed, and what changed since the previous round (`start_round`), so the round can leave out the
queues at rest.

A view depends on the store's counters of its queue, the queue's own counters and settings, its
groups' delivery state, and the time: through a group's `lag_seconds` (the age of its oldest unacked
message) and its consumers seen in the last minutes. A queue *at rest* (no group with lag, no consumer
seen) has a view that time does not change. Such a view is kept and given again as long as the store
reports the queue unchanged (Store.changed_queues), its groups report no change (GroupChanges: a
consumer seen again included) and nothing the view reads of the queue and its groups moved
(`_mark`); every other queue gets a new view.

Owned by the event loop thread, like the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from chunkmq.broker.group import Group, GroupChanges
from chunkmq.broker.queue import Queue
from chunkmq.broker.sources import QueuesSource

if TYPE_CHECKING:
    from chunkmq.broker.views import QueueView


class RestingSource(QueuesSource, Protocol):
    """What the resting views read of the broker (a Broker is one)."""

    @property
    def group_changes(self) -> GroupChanges: ...


def _mark(queue: Queue) -> tuple[Any, ...]:
    """What a view reads of the queue and its groups besides the store's counters."""
    return (queue.settings, queue.producer_visible, queue.consumer_visible, queue.messages_in, queue.messages_dropped,
            queue.dead_lettered, queue.delivered, queue.expired,
            tuple([(g.name, g.changes, g.tag_filter, g.missed, g.acked, g.expired) for g in queue.groups.values()]))


def _at_rest(view: QueueView) -> bool:
    return all(g.lag == 0 and g.lag_seconds == 0 and not g.consumers for g in view.groups)


class RestingViews:
    """Views of every queue for one reader of Store.changed_queues (`reader`)."""

    def __init__(self, broker: RestingSource, reader: str) -> None:
        self.broker = broker
        self.reader = reader
        self._kept: dict[int, tuple[tuple[Any, ...], QueueView]] = {}
        self._changed: set[int] = set()
        self.built = 0  # views built since start (the rest were given again)

    def start_round(self) -> set[int] | None:
        """Take what changed since the previous round; call before the round's `view` calls. Returns
        the ids of the queues that changed (appended to or trimmed, created or deleted, their groups'
        delivery state changed, a group added or removed, a consumer seen again), or None on the
        first round (every queue)."""
        moved = self.broker.group_changes.take_queues(self.reader)
        self._changed = self.broker.store.changed_queues(self.reader) | (moved or set())
        alive = self.broker.queues_by_id
        for queue_id in [q for q in self._changed if q not in alive]:
            self._kept.pop(queue_id, None)
        return None if moved is None else self._changed

    def queue_ids(self) -> list[int]:
        """The ids of every queue."""
        return list(self.broker.queues_by_id)

    def queue_id(self, name: str) -> int | None:
        """Queue `name`'s id; None if it does not exist."""
        queue = self.broker.queues.get(name)
        return queue.id if queue is not None else None

    def view_of(self, queue_id: int, now: int) -> QueueView | None:
        """The view of the queue with id `queue_id`; None if it does not exist (deleted)."""
        queue = self.broker.queues_by_id.get(queue_id)
        return self.view(queue.name, now) if queue is not None else None

    def view(self, name: str, now: int) -> QueueView | None:
        """Queue `name`'s view; None if it does not exist (deleted while the round yielded)."""
        queue = self.broker.queues.get(name)
        if queue is None:
            return None
        mark = _mark(queue)
        kept = self._kept.get(queue.id)
        if kept is not None and queue.id not in self._changed and kept[0] == mark:
            return kept[1]
        from chunkmq.broker.views import queue_view  # not at import: a server's first stage does without

        view = queue_view(self.broker, queue, now)
        self.built += 1
        if _at_rest(view):
            self._kept[queue.id] = (mark, view)
        else:
            self._kept.pop(queue.id, None)
        return view


class LaggingGroups:
    """The groups with lag, for the overview's most lagging groups: a group's lag is looked at again only
    when its queue was appended to or trimmed (Store.changed_queues) or its groups' floors moved
    (GroupChanges), not for every group at every page."""

    def __init__(self, broker: RestingSource) -> None:
        self.broker = broker
        self._lagging: dict[int, set[str]] = {}  # queue id -> names of its groups with lag

    def candidates(self) -> list[tuple[int, Queue, Group]]:
        """(lag, queue, group) of every group with lag > 0."""
        broker, store = self.broker, self.broker.store
        changed = store.changed_queues("lagging")
        moved = broker.group_changes.take_queues("lagging")
        for queue_id in set(broker.queues_by_id) if moved is None else changed | moved:
            self._lagging.pop(queue_id, None)
            queue = broker.queues_by_id.get(queue_id)
            names = {g.name for g in queue.groups.values() if g.lag_in(store) > 0} if queue is not None else None
            if names:
                self._lagging[queue_id] = names
        out = []
        for queue_id, names in self._lagging.items():
            queue = broker.queues_by_id.get(queue_id)
            for name in names if queue is not None else ():
                group = queue.groups.get(name)
                if group is not None and (lag := group.lag_in(store)) > 0:
                    out.append((lag, queue, group))
        return out
