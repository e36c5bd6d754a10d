"""Plain frozen values the repository hands out. ORM instances never leave app/meta."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the row functions read ORM objects; the rows themselves need no SQLAlchemy
    from chunkmq.meta import models


@dataclass(frozen=True, slots=True)
class ExchangeRow:
    id: int
    name: str
    type: str
    alternate_exchange: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class QueueRow:
    id: int
    name: str
    max_messages: int | None
    max_bytes: int | None
    max_age_seconds: int | None
    overflow: str
    dead_letter_exchange: str | None
    dead_letter_routing_key: str | None
    max_deliveries: int | None
    ack_timeout_ms: int
    producer_visible: bool
    consumer_visible: bool
    created_at: datetime
    messages_dropped: int = 0
    message_ttl_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class BindingRow:
    id: int
    exchange: str
    queue: str
    routing_key: str
    arguments: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class GroupRow:
    id: int
    queue_id: int
    name: str
    ack_floor: int
    start: str
    tag_filter: tuple[str, ...] | None
    created_at: datetime
    updated_at: datetime
    missed: int = 0
    next_offset: int | None = None  # None: the ack floor
    done: tuple[tuple[int, int], ...] = ()  # acknowledged [start, end) ranges above the floor
    paused: bool = False
    paused_until_ms: int | None = None  # epoch ms; a time passed: not paused
    single_active_consumer: bool = False


@dataclass(frozen=True, slots=True)
class GroupState:
    """What the broker writes for a group: its floor and everything above it that is done."""

    queue_id: int
    name: str
    ack_floor: int
    next_offset: int
    done: tuple[tuple[int, int], ...]
    missed: int


@dataclass(frozen=True, slots=True)
class UserRow:
    """A user without its password hash: nothing outside app/meta needs it."""

    id: int
    name: str
    is_admin: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token without its hash; `prefix` (its first 8 characters) identifies it on screen."""

    id: int
    name: str
    prefix: str
    is_admin: bool
    configure: str
    write: str
    read: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class MetaSnapshot:
    """Everything the broker loads at start, each kind ordered by id."""

    exchanges: tuple[ExchangeRow, ...]
    queues: tuple[QueueRow, ...]
    bindings: tuple[BindingRow, ...]
    groups: tuple[GroupRow, ...]


def exchange_row(o: models.Exchange) -> ExchangeRow:
    return ExchangeRow(o.id, o.name, o.type, o.alternate_exchange, o.created_at)


def queue_row(o: models.Queue) -> QueueRow:
    return QueueRow(
        id=o.id, name=o.name, max_messages=o.max_messages, max_bytes=o.max_bytes,
        max_age_seconds=o.max_age_seconds, overflow=o.overflow, dead_letter_exchange=o.dead_letter_exchange,
        dead_letter_routing_key=o.dead_letter_routing_key, max_deliveries=o.max_deliveries,
        ack_timeout_ms=o.ack_timeout_ms, producer_visible=o.producer_visible,
        consumer_visible=o.consumer_visible, created_at=o.created_at, messages_dropped=o.messages_dropped,
        message_ttl_seconds=o.message_ttl_seconds,
    )


def binding_row(o: models.Binding) -> BindingRow:
    return BindingRow(o.id, o.exchange, o.queue, o.routing_key, dict(o.arguments), o.created_at)


def group_row(o: models.Group) -> GroupRow:
    tags = None if o.tag_filter is None else tuple(o.tag_filter)
    done = tuple((int(a), int(b)) for a, b in o.done or ())
    return GroupRow(o.id, o.queue_id, o.name, o.ack_floor, o.start, tags, o.created_at, o.updated_at, o.missed,
                    o.next_offset, done, o.paused, o.paused_until_ms, o.single_active_consumer)


def user_row(o: models.User) -> UserRow:
    return UserRow(o.id, o.name, o.is_admin, o.created_at)


def token_row(o: models.Token) -> TokenRow:
    return TokenRow(o.id, o.name, o.prefix, o.is_admin, o.configure, o.write, o.read, o.created_at, o.last_used_at)
