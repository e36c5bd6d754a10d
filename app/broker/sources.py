"""What the read model (views.py), the history and the resting views read of the broker: Protocols
that a Broker satisfies, so that none of them imports the Broker class (which imports the history).
Here rather than in views.py, so that the broker's own modules can name them without loading the views."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from chunkmq.broker.clearing import Clearing
    from chunkmq.broker.disk import DiskGuard
    from chunkmq.broker.group import Group
    from chunkmq.broker.queue import Queue
    from chunkmq.broker.routing import RoutingTable
    from chunkmq.broker.stats import BrokerStats
    from chunkmq.broker.tier import Tier
    from chunkmq.config import Settings
    from chunkmq.meta import MetaStore
    from chunkmq.storage import Store


class Lagging(Protocol):
    """The groups with lag, kept up to date as queues change (resting.LaggingGroups is one)."""

    def candidates(self) -> list[tuple[int, Queue, Group]]: ...


class Estimates(Protocol):
    """The groups' time-to-clear estimates, as of their newest samples (history.History is one)."""

    def clearing(self, queue_id: int, group: str) -> Clearing: ...


class StoreSource(Protocol):
    """What a queue's or a group's view reads: the storage engine's offsets, and the history's
    time-to-clear estimates."""

    @property
    def store(self) -> Store: ...
    @property
    def history(self) -> Estimates: ...


class QueuesSource(StoreSource, Protocol):
    """What a round over every queue reads: the queues by name and by id, and their offsets."""

    @property
    def queues(self) -> Mapping[str, Queue]: ...
    @property
    def queues_by_id(self) -> Mapping[int, Queue]: ...


class Source(StoreSource, Protocol):
    """What the read model reads of the broker (a Broker is one): its state, never an operation."""

    def sorted_queue_names(self) -> list[str]: ...

    @property
    def settings(self) -> Settings: ...
    @property
    def meta(self) -> MetaStore: ...
    @property
    def routing(self) -> RoutingTable: ...
    @property
    def queues(self) -> Mapping[str, Queue]: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def disk(self) -> DiskGuard: ...
    @property
    def tier(self) -> Tier | None: ...
    @property
    def durability(self) -> str: ...
    @property
    def lagging(self) -> Lagging: ...
