"""SQLAlchemy models of the metadata database (DESIGN.md "Data model").

The schema is created by Alembic (alembic/versions/); tests/meta/test_migrations.py fails when these
models and the migrations disagree. Change both together (docs/metadata.md says how).

Names are the identity clients use; bindings refer to exchanges and queues by name, groups to their
queue by id (the broker addresses storage by queue id). `queues` and `bindings` use SQLite
AUTOINCREMENT so an id is never handed out twice: queue storage directories are named by id, and a
reused id would resurrect the files of a deleted queue.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from chunkmq.meta.alert_kinds import ALERT_KINDS
from chunkmq.meta.types import BigInt, CanonicalJSON, UtcDateTime, utcnow

EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "hash")
OVERFLOW_POLICIES = ("drop_head", "reject_publish")
GROUP_STARTS = ("earliest", "latest")
NAME_MAX = 200
DEFAULT_ACK_TIMEOUT_MS = 30_000

# Deterministic constraint names: Alembic's batch mode (how SQLite alters tables) needs names to
# drop or change a constraint later.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _name_length(column: str = "name") -> str:
    return f"length({column}) BETWEEN 1 AND {NAME_MAX}"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Exchange(Base):
    __tablename__ = "exchanges"
    __table_args__ = (
        CheckConstraint(_name_length(), name="name_length"),
        CheckConstraint(_in("type", EXCHANGE_TYPES), name="type"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX), unique=True)
    type: Mapped[str] = mapped_column(String(16))
    # By name and without a foreign key: as in RabbitMQ it may name an exchange declared later.
    alternate_exchange: Mapped[str | None] = mapped_column(String(NAME_MAX))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Queue(Base):
    __tablename__ = "queues"
    __table_args__ = (
        CheckConstraint(_name_length(), name="name_length"),
        CheckConstraint(_in("overflow", OVERFLOW_POLICIES), name="overflow"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX), unique=True)
    max_messages: Mapped[int | None] = mapped_column(BigInt)
    max_bytes: Mapped[int | None] = mapped_column(BigInt)
    max_age_seconds: Mapped[int | None]
    overflow: Mapped[str] = mapped_column(String(16), default="drop_head", server_default="drop_head")
    dead_letter_exchange: Mapped[str | None] = mapped_column(String(NAME_MAX))
    dead_letter_routing_key: Mapped[str | None] = mapped_column(String(255))
    max_deliveries: Mapped[int | None]
    ack_timeout_ms: Mapped[int] = mapped_column(
        default=DEFAULT_ACK_TIMEOUT_MS, server_default=str(DEFAULT_ACK_TIMEOUT_MS)
    )
    producer_visible: Mapped[bool] = mapped_column(default=True, server_default="1")
    consumer_visible: Mapped[bool] = mapped_column(default=True, server_default="1")
    message_ttl_seconds: Mapped[int | None]  # messages expire this long after publish; NULL: never
    # Messages lost to limits, the delivery limit or the disk policy before every group had them.
    messages_dropped: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Binding(Base):
    __tablename__ = "bindings"
    __table_args__ = (
        # `arguments` is canonical JSON text, so this is unique over equal argument objects.
        UniqueConstraint("exchange", "queue", "routing_key", "arguments"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    # The default exchange "" has no row, so it can never be bound (as in AMQP).
    # The unique constraint's index (exchange first) serves the exchange side; queue needs its own
    # for the cascade on queue delete.
    exchange: Mapped[str] = mapped_column(String(NAME_MAX), ForeignKey("exchanges.name", ondelete="CASCADE"))
    queue: Mapped[str] = mapped_column(String(NAME_MAX), ForeignKey("queues.name", ondelete="CASCADE"), index=True)
    routing_key: Mapped[str] = mapped_column(String(255), default="", server_default=text("''"))
    arguments: Mapped[dict[str, Any]] = mapped_column(CanonicalJSON, default=dict, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Group(Base):
    __tablename__ = "groups"
    __table_args__ = (
        UniqueConstraint("queue_id", "name"),
        CheckConstraint(_name_length(), name="name_length"),
        CheckConstraint(_in("start", GROUP_STARTS), name="start"),
        CheckConstraint("ack_floor >= 0", name="ack_floor"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    queue_id: Mapped[int] = mapped_column(ForeignKey("queues.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    # Every offset below the floor is done; the broker writes it behind, batched.
    ack_floor: Mapped[int] = mapped_column(BigInt, default=0, server_default="0")
    start: Mapped[str] = mapped_column(String(16), default="earliest", server_default="earliest")
    tag_filter: Mapped[list[str] | None] = mapped_column(CanonicalJSON)
    # With the floor: the next offset to deliver (NULL: the floor) and the acknowledged offsets above
    # the floor as [[start, end), ...] ranges, so a restart redelivers nothing whose ack was answered.
    next_offset: Mapped[int | None] = mapped_column(BigInteger)
    done: Mapped[list[list[int]] | None] = mapped_column(CanonicalJSON)
    # Messages removed before this group consumed them (written with the floor).
    missed: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # A paused group delivers nothing; a timed pause ends by itself at paused_until_ms (epoch ms),
    # so a row whose time has passed is not paused and the timed resume needs no write.
    paused: Mapped[bool] = mapped_column(default=False, server_default="0")
    paused_until_ms: Mapped[int | None] = mapped_column(BigInteger)
    # One attached consumer at a time receives the group's messages (app/broker/active.py).
    single_active_consumer: Mapped[bool] = mapped_column(default=False, server_default="0")


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_name_length(), name="name_length"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX), unique=True)
    # "scrypt$n$r$p$<salt hex>$<hash hex>" (app/auth/passwords.py).
    password_hash: Mapped[str] = mapped_column(String(255))
    is_admin: Mapped[bool] = mapped_column(default=False, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Token(Base):
    __tablename__ = "tokens"
    __table_args__ = (CheckConstraint(_name_length(), name="name_length"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    # sha256 hex of the plain token; the plain token itself is shown once and never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(8))
    is_admin: Mapped[bool] = mapped_column(default=False, server_default="0")
    # RabbitMQ-style regexes over resource names; "" matches nothing.
    configure: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    write: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    read: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class QueueHistory(Base):
    """Sampled metrics of a queue (app/broker/history.py), at two resolutions told apart by step_ms."""

    __tablename__ = "queue_history"
    __table_args__ = (Index(None, "queue_id", "step_ms", "t"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    # Deleting the queue deletes its history.
    queue_id: Mapped[int] = mapped_column(ForeignKey("queues.id", ondelete="CASCADE"))
    step_ms: Mapped[int]  # the resolution this point belongs to
    t: Mapped[int] = mapped_column(BigInteger, index=True)  # epoch ms; the index serves pruning by age
    messages: Mapped[float]
    bytes: Mapped[float]
    publish_rate: Mapped[float]
    deliver_rate: Mapped[float]


class GroupHistory(Base):
    """Sampled metrics of a consumer group, as QueueHistory."""

    __tablename__ = "group_history"
    __table_args__ = (
        # Deleting the group (or its queue, which deletes the group) deletes its history.
        ForeignKeyConstraint(["queue_id", "group_name"], ["groups.queue_id", "groups.name"], ondelete="CASCADE"),
        Index(None, "queue_id", "group_name", "step_ms", "t"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    queue_id: Mapped[int]
    group_name: Mapped[str] = mapped_column(String(NAME_MAX))
    step_ms: Mapped[int]
    t: Mapped[int] = mapped_column(BigInteger, index=True)
    lag: Mapped[float]
    lag_seconds: Mapped[float]
    ack_rate: Mapped[float]
    consumers: Mapped[float]
    ack_floor: Mapped[int] = mapped_column(BigInteger)
    floor_moved_at: Mapped[int] = mapped_column(BigInteger)  # epoch ms the ack floor last moved


class HistorySample(Base):
    """The instants the history was sampled at, per resolution. A queue or group gets a history row
    only when its figures changed since its previous row: its series holds its newest row's values at
    every instant after it (app/broker/history.py)."""

    __tablename__ = "history_samples"
    __table_args__ = (Index(None, "step_ms", "t"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    step_ms: Mapped[int]
    t: Mapped[int] = mapped_column(BigInteger)


# --- alerts (app/alerts, docs/alerts.md) ---------------------------------------------------------

ALERT_STATES = ("ok", "pending", "firing", "resolved")
ALERT_EVENT_TYPES = ("transition", "mail")


class AlertRule(Base):
    __tablename__ = "alert_rules"
    __table_args__ = (
        CheckConstraint(_in("kind", ALERT_KINDS), name="kind"),
        CheckConstraint("threshold >= 0 AND for_seconds >= 0 AND renotify_seconds >= 0", name="durations"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigInt, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    # fnmatch globs over queue and group names; "*" is everything.
    queue: Mapped[str] = mapped_column(String(NAME_MAX), default="*", server_default="*")
    group: Mapped[str] = mapped_column(String(NAME_MAX), default="*", server_default="*")
    threshold: Mapped[float]
    for_seconds: Mapped[float] = mapped_column(default=0, server_default="0")
    renotify_seconds: Mapped[float] = mapped_column(default=3600, server_default="3600")
    # dead_letters counts over this window; the other kinds ignore it.
    window_seconds: Mapped[float] = mapped_column(default=300, server_default="300")
    recipients: Mapped[list[str]] = mapped_column(CanonicalJSON, default=list, server_default="[]")
    enabled: Mapped[bool] = mapped_column(default=True, server_default="1")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AlertState(Base):
    """The state machine of one (rule, queue, group); kept so a restart neither forgets nor re-fires."""

    __tablename__ = "alert_states"
    __table_args__ = (CheckConstraint(_in("state", ALERT_STATES), name="state"),)

    rule_id: Mapped[int] = mapped_column(BigInt, ForeignKey("alert_rules.id", ondelete="CASCADE"), primary_key=True)
    queue: Mapped[str] = mapped_column(String(NAME_MAX), primary_key=True)
    group: Mapped[str] = mapped_column(String(NAME_MAX), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float] = mapped_column(default=0, server_default="0")
    # Epoch milliseconds: the engine's clock, compared with `for` and re-notify durations.
    since_ms: Mapped[int] = mapped_column(BigInteger)
    breach_since_ms: Mapped[int | None] = mapped_column(BigInteger)
    clear_since_ms: Mapped[int | None] = mapped_column(BigInteger)
    fired_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    notified_at_ms: Mapped[int | None] = mapped_column(BigInteger)


class AlertEvent(Base):
    """History: every state transition and every mail attempt. No foreign key: history outlives rules."""

    __tablename__ = "alert_events"
    __table_args__ = (
        CheckConstraint(_in("type", ALERT_EVENT_TYPES), name="type"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    type: Mapped[str] = mapped_column(String(16))
    # transition: the new state; mail: sent | failed
    state: Mapped[str] = mapped_column(String(16))
    previous: Mapped[str | None] = mapped_column(String(16))
    rule_id: Mapped[int | None] = mapped_column(BigInt)
    kind: Mapped[str] = mapped_column(String(32), default="", server_default=text("''"))
    queue: Mapped[str] = mapped_column(String(NAME_MAX), default="", server_default=text("''"))
    group: Mapped[str] = mapped_column(String(NAME_MAX), default="", server_default=text("''"))
    value: Mapped[float | None]
    threshold: Mapped[float | None]
    # mail: recipients, subject and the SMTP server's answer (or the connection error)
    detail: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))


class AlertMail(Base):
    """The outbox: an alert notice waiting to be mailed. Written in the transaction that records the
    alert's transition and deleted once the SMTP server accepted the mail (or it was given up), so a
    notice survives a crash between the two; `attempts` and `next_at_ms` carry the backoff over a restart."""

    __tablename__ = "alert_outbox"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    recipients: Mapped[list[str]] = mapped_column(CanonicalJSON)
    # The notice as app/alerts/outbox.py composes it (rule, measurement, trend): the rule may be gone
    # by the time the mail goes out.
    notice: Mapped[dict[str, Any]] = mapped_column(CanonicalJSON)
    attempts: Mapped[int] = mapped_column(default=0, server_default="0")
    next_at_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


# --- audit log (app/meta/audit.py, docs/metadata.md) ---------------------------------------------

AUDIT_SOURCES = ("api", "console", "cli")


class AuditEntry(Base):
    """One state-changing action: who did what to which resource, from where, when, and how it ended.
    Never a secret: no token values, passwords or bodies. No foreign key: the log outlives what it names."""

    __tablename__ = "audit_log"
    __table_args__ = (
        CheckConstraint(_in("source", AUDIT_SOURCES), name="source"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)  # epoch ms; the index serves pruning and ranges
    source: Mapped[str] = mapped_column(String(16))
    who: Mapped[str] = mapped_column(String(NAME_MAX), index=True)  # token name or console/OS user; "" unknown
    address: Mapped[str] = mapped_column(String(64), default="", server_default=text("''"))
    action: Mapped[str] = mapped_column(String(64), index=True)  # e.g. queue.purge
    resource: Mapped[str] = mapped_column(Text, default="", server_default=text("''"))
    result: Mapped[str] = mapped_column(String(64))  # "ok" or the API error code


# --- tier manifest (app/meta/tier.py, docs/storage.md) --------------------------------------------

TIER_STATES = ("local", "uploading", "uploaded", "evicted")


class TierChunk(Base):
    """The tier manifest (app/meta/tier.py): one row per sealed chunk file, by its first number (a
    file the collector merged stands for `number .. last`). `object_key` is its object below the
    tier's prefix; `size` and `md5` what the upload was verified against. States: local (sealed, not
    uploaded), uploading (an upload may have begun: the object may exist, half-written objects are
    never read), uploaded (verified in the bucket and still on local disk), evicted (in the bucket
    only)."""

    __tablename__ = "tier_chunks"
    __table_args__ = (CheckConstraint(_in("state", TIER_STATES), name="state"),)

    number: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    last: Mapped[int] = mapped_column(BigInteger)
    object_key: Mapped[str] = mapped_column(String(400))
    size: Mapped[int] = mapped_column(BigInteger)
    md5: Mapped[str] = mapped_column(String(32), default="", server_default=text("''"))
    state: Mapped[str] = mapped_column(String(16))
    updated_ms: Mapped[int] = mapped_column(BigInteger)
