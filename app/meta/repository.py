"""MetaStore: every read and write of the metadata database.

The broker loads a snapshot at start and calls the write methods on admin changes; the floor writer
calls `save_group_states` from its own thread. Each method runs in its own short session, so a
MetaStore is safe to share between threads. Nothing here is on the publish or pull path.

Every method takes and returns plain values (app/meta/rows.py); every database integrity error is
translated in `_transaction` into an app/meta/errors.py exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Double,
    Integer,
    String,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session, aliased, sessionmaker

from chunkmq.auth.passwords import burn_verify, hash_password, password_problem, verify_password
from chunkmq.auth.permissions import ACTIONS, InvalidPattern, compile_pattern
from chunkmq.auth.tokens import TOKEN_PREFIX, display_prefix, generate_token, hash_token
from chunkmq.meta import models as m
from chunkmq.meta.engine import IMMEDIATE, make_engine
from chunkmq.meta.errors import InvalidValue, NotFound, translate_integrity_error
from chunkmq.meta.rows import (
    BindingRow,
    ExchangeRow,
    GroupRow,
    GroupState,
    MetaSnapshot,
    QueueRow,
    TokenRow,
    UserRow,
    binding_row,
    exchange_row,
    group_row,
    queue_row,
    token_row,
    user_row,
)
from chunkmq.meta.types import canonical_json, utcnow

# The queue columns update_queue may change: everything but the identity.
QUEUE_SETTINGS = frozenset(
    c.key for c in m.Queue.__table__.columns if c.key not in {"id", "name", "created_at"}
)

_groups = m.Group.__table__
_queues = m.Queue.__table__
_save_floor = (
    update(_groups)
    .where(_groups.c.queue_id == bindparam("b_queue_id"), _groups.c.name == bindparam("b_name"))
    .values(ack_floor=bindparam("b_floor"), next_offset=bindparam("b_next"), done=bindparam("b_done"),
            missed=bindparam("b_missed"), updated_at=bindparam("b_now"))
)
_save_dropped = (
    update(_queues).where(_queues.c.id == bindparam("b_id")).values(messages_dropped=bindparam("b_dropped"))
)



def _insert_if_exists(table: Any, types: dict[str, Any], owner: Any) -> Any:
    """INSERT one row of bound parameters only while the row's owner (`owner`, a WHERE clause over
    the same parameters) exists: the history writer runs behind the broker, and a point sampled just
    before its queue or group was deleted must not come back, nor fail the batch on the foreign key."""
    params = [bindparam(name, type_=type_) for name, type_ in types.items()]
    return insert(table).from_select(list(types), select(*params).where(exists().where(owner)))


_QUEUE_POINT = {"queue_id": Integer, "step_ms": Integer, "t": BigInteger, "messages": Double, "bytes": Double,
                "publish_rate": Double, "deliver_rate": Double}
_GROUP_POINT = {"queue_id": Integer, "group_name": String, "step_ms": Integer, "t": BigInteger, "lag": Double,
                "lag_seconds": Double, "ack_rate": Double, "consumers": Double, "ack_floor": BigInteger,
                "floor_moved_at": BigInteger}
_save_queue_point = _insert_if_exists(
    m.QueueHistory.__table__, _QUEUE_POINT, m.Queue.id == bindparam("queue_id", type_=Integer)
)
_save_group_point = _insert_if_exists(
    m.GroupHistory.__table__, _GROUP_POINT,
    and_(_groups.c.queue_id == bindparam("queue_id", type_=Integer),
         _groups.c.name == bindparam("group_name", type_=String)),
)
QUEUE_POINT_FIELDS = tuple(_QUEUE_POINT)[2:]  # t, then the values
GROUP_POINT_FIELDS = tuple(_GROUP_POINT)[3:]


def _check_choice(entity: str, key: object, field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidValue(
            f"{entity} {key!r}: {field} must be one of {', '.join(choices)}, not {value!r}", entity=entity, key=key
        )


def _check_password(name: str, password: str) -> None:
    problem = password_problem(password)
    if problem is not None:
        raise InvalidValue(f"user {name!r}: {problem}", entity="user", key=name)


class MetaStore:
    """The metadata database at `url` (any SQLAlchemy URL). Run chunkmq.meta.migrate.upgrade(url) first."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        self.engine = make_engine(url, **engine_kwargs)
        # Reads see one consistent snapshot; writes take SQLite's write lock when they begin.
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(self.engine.execution_options(**{IMMEDIATE: True}), expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, entity: str, key: object) -> Iterator[Session]:
        """One transaction; integrity errors become MetaErrors about `entity` `key`."""
        try:
            with self._write_sessions.begin() as session:
                yield session
        except (IntegrityError, DataError) as e:
            raise translate_integrity_error(e, entity, key) from e

    def _delete(self, entity: str, key: object, statement: Any) -> None:
        with self._transaction(entity, key) as session:
            if session.execute(statement).rowcount == 0:
                raise NotFound(f"{entity} {key!r} does not exist", entity=entity, key=key)

    # --- start-up -------------------------------------------------------------------------------

    def load(self) -> MetaSnapshot:
        """Exchanges, queues, bindings and groups, each ordered by id, read in one transaction."""
        with self._sessions.begin() as s:
            return MetaSnapshot(
                exchanges=tuple(map(exchange_row, s.scalars(select(m.Exchange).order_by(m.Exchange.id)))),
                queues=tuple(map(queue_row, s.scalars(select(m.Queue).order_by(m.Queue.id)))),
                bindings=tuple(map(binding_row, s.scalars(select(m.Binding).order_by(m.Binding.id)))),
                groups=tuple(map(group_row, s.scalars(select(m.Group).order_by(m.Group.id)))),
            )

    # --- exchanges ------------------------------------------------------------------------------

    def create_exchange(self, name: str, type: str, alternate_exchange: str | None = None) -> ExchangeRow:
        _check_choice("exchange", name, "type", type, m.EXCHANGE_TYPES)
        with self._transaction("exchange", name) as s:
            row = m.Exchange(name=name, type=type, alternate_exchange=alternate_exchange)
            s.add(row)
            s.flush()
            return exchange_row(row)

    def delete_exchange(self, name: str) -> None:
        """Delete the exchange and (by cascade) its bindings."""
        self._delete("exchange", name, delete(m.Exchange).where(m.Exchange.name == name))

    # --- queues ---------------------------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        max_age_seconds: int | None = None,
        overflow: str = "drop_head",
        dead_letter_exchange: str | None = None,
        dead_letter_routing_key: str | None = None,
        max_deliveries: int | None = None,
        ack_timeout_ms: int = m.DEFAULT_ACK_TIMEOUT_MS,
        producer_visible: bool = True,
        consumer_visible: bool = True,
        message_ttl_seconds: int | None = None,
    ) -> QueueRow:
        """A new queue; its id comes from the database and is never one a deleted queue had."""
        _check_choice("queue", name, "overflow", overflow, m.OVERFLOW_POLICIES)
        with self._transaction("queue", name) as s:
            row = m.Queue(
                name=name, max_messages=max_messages, max_bytes=max_bytes, max_age_seconds=max_age_seconds,
                overflow=overflow, dead_letter_exchange=dead_letter_exchange,
                dead_letter_routing_key=dead_letter_routing_key, max_deliveries=max_deliveries,
                ack_timeout_ms=ack_timeout_ms, producer_visible=producer_visible,
                consumer_visible=consumer_visible, message_ttl_seconds=message_ttl_seconds,
            )
            s.add(row)
            s.flush()
            return queue_row(row)

    def update_queue(self, name: str, /, **fields: Any) -> QueueRow:
        """Change some of QUEUE_SETTINGS (limits, dead-lettering, visibility) of queue `name`."""
        unknown = sorted(set(fields) - QUEUE_SETTINGS)
        if unknown:
            raise InvalidValue(f"queue {name!r}: cannot update {', '.join(unknown)}", entity="queue", key=name)
        if "overflow" in fields:
            _check_choice("queue", name, "overflow", fields["overflow"], m.OVERFLOW_POLICIES)
        with self._transaction("queue", name) as s:
            row = s.scalar(select(m.Queue).where(m.Queue.name == name))
            if row is None:
                raise NotFound(f"queue {name!r} does not exist", entity="queue", key=name)
            for field, value in fields.items():
                setattr(row, field, value)
            s.flush()
            return queue_row(row)

    def delete_queue(self, name: str) -> None:
        """Delete the queue and (by cascade) its bindings and groups."""
        self._delete("queue", name, delete(m.Queue).where(m.Queue.name == name))

    # --- bindings -------------------------------------------------------------------------------

    def create_binding(
        self, exchange: str, queue: str, routing_key: str = "", arguments: dict[str, Any] | None = None
    ) -> BindingRow:
        """Bind `queue` to `exchange`. AlreadyExists when an equal binding (same arguments, in any key
        order) exists; NotFound when either end does not."""
        key = (exchange, queue, routing_key)
        arguments = {} if arguments is None else arguments
        if exchange == "":
            raise InvalidValue("the default exchange cannot be bound", entity="binding", key=key)
        if not isinstance(arguments, dict):
            raise InvalidValue(f"binding {key!r}: arguments must be an object", entity="binding", key=key)
        try:
            canonical_json(arguments)
        except (TypeError, ValueError) as e:
            raise InvalidValue(f"binding {key!r}: arguments are not JSON: {e}", entity="binding", key=key) from e
        with self._transaction("binding", key) as s:
            if not s.scalar(select(exists().where(m.Exchange.name == exchange))):
                raise NotFound(f"exchange {exchange!r} does not exist", entity="exchange", key=exchange)
            if not s.scalar(select(exists().where(m.Queue.name == queue))):
                raise NotFound(f"queue {queue!r} does not exist", entity="queue", key=queue)
            row = m.Binding(exchange=exchange, queue=queue, routing_key=routing_key, arguments=arguments)
            s.add(row)
            s.flush()
            return binding_row(row)

    def delete_binding(self, id: int) -> None:
        self._delete("binding", id, delete(m.Binding).where(m.Binding.id == id))

    # --- consumer groups ------------------------------------------------------------------------

    def upsert_group(
        self,
        queue_id: int,
        name: str,
        *,
        start: str = "earliest",
        tag_filter: Sequence[str] | None = None,
        ack_floor: int | None = None,
        single_active_consumer: bool | None = None,
    ) -> GroupRow:
        """Create group `name` on queue `queue_id`, or update it. `ack_floor=None` keeps the stored
        floor (0 for a new group), `single_active_consumer=None` the stored setting (off)."""
        key = (queue_id, name)
        _check_choice("group", key, "start", start, m.GROUP_STARTS)
        if isinstance(tag_filter, str):  # a lone string would become a list of its characters
            raise InvalidValue(f"group {key!r}: tag_filter must be a list of tags", entity="group", key=key)
        tags = None if tag_filter is None else list(tag_filter)
        with self._transaction("group", key) as s:
            if s.get(m.Queue, queue_id) is None:
                raise NotFound(f"queue id {queue_id} does not exist", entity="queue", key=queue_id)
            row = s.scalar(select(m.Group).where(m.Group.queue_id == queue_id, m.Group.name == name))
            if row is None:
                row = m.Group(queue_id=queue_id, name=name, ack_floor=ack_floor or 0)
                s.add(row)
            elif ack_floor is not None:
                row.ack_floor = ack_floor
            row.start = start
            row.tag_filter = tags
            if single_active_consumer is not None:
                row.single_active_consumer = single_active_consumer
            row.updated_at = utcnow()
            s.flush()
            return group_row(row)

    def set_group_pause(self, queue_id: int, name: str, paused: bool, until_ms: int | None = None) -> None:
        """Pause group `name` (until epoch ms `until_ms`, or until resumed), or resume it."""
        key = (queue_id, name)
        with self._transaction("group", key) as s:
            row = s.scalar(select(m.Group).where(m.Group.queue_id == queue_id, m.Group.name == name))
            if row is None:
                raise NotFound(f"group {key!r} does not exist", entity="group", key=key)
            row.paused = paused
            row.paused_until_ms = until_ms if paused else None
            row.updated_at = utcnow()

    def delete_group(self, queue_id: int, name: str) -> None:
        key = (queue_id, name)
        self._delete("group", key, delete(m.Group).where(m.Group.queue_id == queue_id, m.Group.name == name))

    def save_group_states(self, states: Iterable[GroupState], dropped: Iterable[tuple[int, int]] = ()) -> None:
        """Write many groups' states and queues' (id, messages_dropped) in one transaction (one
        executemany each). Groups and queues deleted meanwhile are skipped: the writer runs behind."""
        now = utcnow()
        params = [
            {"b_queue_id": g.queue_id, "b_name": g.name, "b_floor": g.ack_floor, "b_next": g.next_offset,
             "b_done": [list(r) for r in g.done] if g.done else None, "b_missed": g.missed,
             "b_now": now}
            for g in states
        ]
        counts = [{"b_id": q, "b_dropped": n} for q, n in dropped]
        if not params and not counts:
            return
        with self._transaction("group", "states") as s:
            if params:
                s.connection().execute(_save_floor, params)
            if counts:
                s.connection().execute(_save_dropped, counts)

    # --- history (app/broker/history.py) -------------------------------------------------------

    def save_history(self, queue_points: Sequence[dict[str, Any]], group_points: Sequence[dict[str, Any]],
                     samples: Sequence[dict[str, int]] = ()) -> None:
        """Append sampled points (dicts with the columns of QueueHistory / GroupHistory) and the
        instants sampled (dicts of step_ms and t) in one transaction. Points of a queue or group
        deleted meanwhile are skipped."""
        if not queue_points and not group_points and not samples:
            return
        with self._transaction("history", "points") as s:
            connection = s.connection()
            if queue_points:
                connection.execute(_save_queue_point, list(queue_points))
            if group_points:
                connection.execute(_save_group_point, list(group_points))
            if samples:
                connection.execute(insert(m.HistorySample), list(samples))

    def prune_history(self, fine_before: int, coarse_before: int, coarse_step_ms: int, fine_after: int = 0,
                      coarse_after: int = 0) -> int:
        """Delete points older than their resolution keeps: finer than `coarse_step_ms` before
        `fine_before`, every point before `coarse_before` (epoch ms), except each series' newest point
        before the cut, whose values the series holds until its next point. Only the series with a
        point from `*_after` on (the previous cuts) are looked at: a queue at rest costs nothing.
        Returns how many points went."""
        deleted = 0
        hs = m.HistorySample
        with self._transaction("history", "prune") as s:
            for model, keys in ((m.QueueHistory, ("queue_id",)), (m.GroupHistory, ("queue_id", "group_name"))):
                for fine, before, after in ((True, fine_before, fine_after), (False, coarse_before, coarse_after)):
                    if before <= after:
                        continue
                    columns = [getattr(model, k) for k in (*keys, "step_ms")]
                    aged = select(*columns).where(model.t >= after, model.t < before).distinct()
                    if fine:
                        aged = aged.where(model.step_ms < coarse_step_ms)
                    for row in s.execute(aged).all():
                        newer = aliased(model)
                        same = [getattr(model, k) == v for k, v in zip((*keys, "step_ms"), row, strict=True)]
                        same_newer = [getattr(newer, k) == v for k, v in zip((*keys, "step_ms"), row, strict=True)]
                        newest = select(func.max(newer.t)).where(*same_newer, newer.t < before).scalar_subquery()
                        deleted += s.execute(delete(model).where(*same, model.t < newest)).rowcount
            s.execute(delete(hs).where(or_(and_(hs.step_ms < coarse_step_ms, hs.t < fine_before),
                                           hs.t < coarse_before)))
        return deleted

    def _series_rows(self, model: Any, where: list[Any], fields: Sequence[str], since: int,
                     until: int) -> list[tuple[Any, ...]]:
        """Points of one series with since <= t < until, oldest first, after its newest point before
        `since` (if any): the values the series holds at `since`."""
        columns = [getattr(model, name) for name in fields]
        before = select(*columns).where(*where, model.t < since).order_by(model.t.desc(), model.id.desc()).limit(1)
        window = select(*columns).where(*where, model.t >= since, model.t < until).order_by(model.t, model.id)
        with self._sessions() as s:
            return [tuple(row) for row in s.execute(before)] + [tuple(row) for row in s.execute(window)]

    def queue_history(self, queue_id: int, step_ms: int, since: int, until: int) -> list[tuple[Any, ...]]:
        """Points (t, *QUEUE_POINT_FIELDS[1:]) of one resolution with since <= t < until, oldest first,
        after the newest one before `since`."""
        h = m.QueueHistory
        return self._series_rows(h, [h.queue_id == queue_id, h.step_ms == step_ms], QUEUE_POINT_FIELDS, since, until)

    def queue_history_all(self, step_ms: int, since: int, until: int) -> list[tuple[Any, ...]]:
        """Points (queue_id, t, *QUEUE_POINT_FIELDS[1:]) of every queue, as queue_history, ordered by t:
        the broker-wide series of the console's overview sums them."""
        h = m.QueueHistory
        columns = [h.queue_id, *(getattr(h, name) for name in QUEUE_POINT_FIELDS)]
        newest = (select(h.queue_id, func.max(h.t).label("t")).where(h.step_ms == step_ms, h.t < since)
                  .group_by(h.queue_id).subquery())
        before = (select(*columns)
                  .join(newest, and_(h.queue_id == newest.c.queue_id, h.t == newest.c.t))
                  .where(h.step_ms == step_ms).order_by(h.t, h.id))
        window = select(*columns).where(h.step_ms == step_ms, h.t >= since, h.t < until).order_by(h.t, h.id)
        with self._sessions() as s:
            return [tuple(row) for row in s.execute(before)] + [tuple(row) for row in s.execute(window)]

    def group_history(self, queue_id: int, group: str, step_ms: int, since: int, until: int) -> list[tuple[Any, ...]]:
        """Points (t, *GROUP_POINT_FIELDS[1:]) of one group, as queue_history."""
        h = m.GroupHistory
        where = [h.queue_id == queue_id, h.group_name == group, h.step_ms == step_ms]
        return self._series_rows(h, where, GROUP_POINT_FIELDS, since, until)

    def history_samples(self, step_ms: int, since: int, until: int) -> list[int]:
        """The instants sampled at one resolution with since <= t < until, oldest first."""
        hs = m.HistorySample
        query = select(hs.t).where(hs.step_ms == step_ms, hs.t >= since, hs.t < until).distinct().order_by(hs.t)
        with self._sessions() as s:
            return list(s.scalars(query))

    def last_group_floors(self) -> list[tuple[int, str, int, int]]:
        """Per group with history: (queue_id, group, ack_floor, floor_moved_at) of its newest point,
        so a restart knows how long a floor has been standing still."""
        h = m.GroupHistory
        newest = (select(h.queue_id, h.group_name, func.max(h.t).label("t"))
                  .group_by(h.queue_id, h.group_name).subquery())
        query = (select(h.queue_id, h.group_name, h.ack_floor, h.floor_moved_at)
                 .join(newest, and_(h.queue_id == newest.c.queue_id, h.group_name == newest.c.group_name,
                                    h.t == newest.c.t))
                 .order_by(h.id))
        with self._sessions() as s:
            return [(q, g, floor, moved) for q, g, floor, moved in s.execute(query)]

    # --- tokens ---------------------------------------------------------------------------------

    def create_token(
        self, name: str, *, is_admin: bool = False, configure: str = "", write: str = "", read: str = ""
    ) -> tuple[TokenRow, str]:
        """A new token, and its plain text: the only time it is available, as only its hash is stored.
        InvalidValue when a pattern is not a valid regular expression."""
        patterns = {"configure": configure, "write": write, "read": read}
        for action in ACTIONS:
            try:
                compile_pattern(action, patterns[action])
            except InvalidPattern as e:
                raise InvalidValue(f"token {name!r}: {e}", entity="token", key=name) from e
        plain = generate_token()
        with self._transaction("token", name) as s:
            row = m.Token(
                name=name, token_hash=hash_token(plain), prefix=display_prefix(plain), is_admin=is_admin, **patterns
            )
            s.add(row)
            s.flush()
            return token_row(row), plain

    def find_token(self, plain: str) -> TokenRow | None:
        """The token whose plain text is `plain`, or None."""
        if not plain.startswith(TOKEN_PREFIX):
            return None
        with self._sessions() as s:
            row = s.scalar(select(m.Token).where(m.Token.token_hash == hash_token(plain)))
            return None if row is None else token_row(row)

    def list_tokens(self) -> list[TokenRow]:
        with self._sessions() as s:
            return [token_row(t) for t in s.scalars(select(m.Token).order_by(m.Token.id))]

    def delete_token(self, id: int) -> None:
        self._delete("token", id, delete(m.Token).where(m.Token.id == id))

    def touch_token(self, id: int) -> None:
        """Record that token `id` was used now (a token deleted meanwhile is ignored)."""
        with self._transaction("token", id) as s:
            s.execute(update(m.Token).where(m.Token.id == id).values(last_used_at=utcnow()))

    def has_tokens(self) -> bool:
        with self._sessions() as s:
            return s.scalar(select(m.Token.id).limit(1)) is not None

    # --- users ----------------------------------------------------------------------------------

    def create_user(self, name: str, password: str, is_admin: bool = False) -> UserRow:
        _check_password(name, password)
        with self._transaction("user", name) as s:
            row = m.User(name=name, password_hash=hash_password(password), is_admin=is_admin)
            s.add(row)
            s.flush()
            return user_row(row)

    def check_password(self, name: str, password: str) -> UserRow | None:
        """The user when `password` is theirs; None otherwise (taking as long for an unknown name)."""
        with self._sessions() as s:
            row = s.scalar(select(m.User).where(m.User.name == name))
            if row is None:
                burn_verify(password)
                return None
            return user_row(row) if verify_password(password, row.password_hash) else None

    def list_users(self) -> list[UserRow]:
        with self._sessions() as s:
            return [user_row(u) for u in s.scalars(select(m.User).order_by(m.User.id))]

    def has_users(self) -> bool:
        with self._sessions() as s:
            return s.scalar(select(m.User.id).limit(1)) is not None

    def set_password(self, name: str, password: str) -> None:
        _check_password(name, password)
        with self._transaction("user", name) as s:
            changed = s.execute(
                update(m.User).where(m.User.name == name).values(password_hash=hash_password(password))
            ).rowcount
            if changed == 0:
                raise NotFound(f"user {name!r} does not exist", entity="user", key=name)

    def delete_user(self, name: str) -> None:
        self._delete("user", name, delete(m.User).where(m.User.name == name))
