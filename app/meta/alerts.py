"""Alert rules, alert states and alert history in the metadata database (app/alerts uses these).

`AlertRepository` shares the MetaStore's engine. Every method runs in its own short session, so it is
safe to call from worker threads; the alert engine calls it through `asyncio.to_thread`, never on the
publish or pull path. Values in and out are plain frozen dataclasses, as in app/meta/rows.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, text, tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from chunkmq.meta import models as m
from chunkmq.meta.engine import IMMEDIATE
from chunkmq.meta.errors import InvalidValue, NotFound
from chunkmq.meta.repository import MetaStore
from chunkmq.meta.types import utcnow

RULE_FIELDS = ("kind", "queue", "group", "threshold", "for_seconds", "renotify_seconds", "window_seconds",
               "recipients", "enabled")


@dataclass(frozen=True, slots=True)
class AlertRuleRow:
    id: int
    kind: str
    queue: str  # glob
    group: str  # glob
    threshold: float
    for_seconds: float
    renotify_seconds: float  # 0: notify once
    window_seconds: float
    recipients: tuple[str, ...]  # empty: the configured default recipients
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AlertStateRow:
    rule_id: int
    queue: str
    group: str
    state: str
    value: float
    since_ms: int
    breach_since_ms: int | None
    clear_since_ms: int | None
    fired_at_ms: int | None
    notified_at_ms: int | None


@dataclass(frozen=True, slots=True)
class AlertEventRow:
    id: int
    at_ms: int
    type: str  # transition | mail
    state: str  # transition: the new state; mail: sent | failed
    previous: str | None
    rule_id: int | None
    kind: str
    queue: str
    group: str
    value: float | None
    threshold: float | None
    detail: str


@dataclass(frozen=True, slots=True)
class NewAlertEvent:
    at_ms: int
    type: str
    state: str
    previous: str | None = None
    rule_id: int | None = None
    kind: str = ""
    queue: str = ""
    group: str = ""
    value: float | None = None
    threshold: float | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A notice waiting in the outbox; `notice` is opaque here (app/alerts/outbox.py reads it)."""

    id: int
    at_ms: int
    recipients: tuple[str, ...]
    notice: dict[str, Any]
    attempts: int
    next_at_ms: int


@dataclass(frozen=True, slots=True)
class NewOutboxMail:
    at_ms: int
    recipients: tuple[str, ...]
    notice: dict[str, Any]


def _rule_row(o: m.AlertRule) -> AlertRuleRow:
    return AlertRuleRow(o.id, o.kind, o.queue, o.group, o.threshold, o.for_seconds, o.renotify_seconds,
                        o.window_seconds, tuple(o.recipients or ()), o.enabled, o.created_at, o.updated_at)


def _state_row(o: m.AlertState) -> AlertStateRow:
    return AlertStateRow(o.rule_id, o.queue, o.group, o.state, o.value, o.since_ms, o.breach_since_ms,
                         o.clear_since_ms, o.fired_at_ms, o.notified_at_ms)


def _event_row(o: m.AlertEvent) -> AlertEventRow:
    return AlertEventRow(o.id, o.at_ms, o.type, o.state, o.previous, o.rule_id, o.kind, o.queue, o.group,
                         o.value, o.threshold, o.detail)


def _add_events(s: Session, events: Sequence[NewAlertEvent]) -> None:
    if events:
        s.execute(insert(m.AlertEvent), [{f: getattr(e, f) for f in NewAlertEvent.__slots__} for e in events])


MAX_RULE_ID = 2**63 - 1  # SQLite's largest rowid


def _next_rule_id(s: Session) -> int:
    """The id of a new rule: after the largest, or, once a PUT took the largest possible id, the
    lowest free one (SQLite's AUTOINCREMENT would fail with "database or disk is full")."""
    top = s.scalar(select(func.max(m.AlertRule.id)))
    if top is None or top < MAX_RULE_ID:
        return 1 if top is None else int(top) + 1
    gap = s.scalar(text("SELECT MIN(id) + 1 FROM alert_rules WHERE id < :top AND id + 1 NOT IN "
                        "(SELECT id FROM alert_rules)"), {"top": MAX_RULE_ID})
    return 1 if gap is None else int(gap)


def _check_rule(fields: dict[str, Any]) -> None:
    if fields["kind"] not in m.ALERT_KINDS:
        raise InvalidValue(f"kind must be one of {', '.join(m.ALERT_KINDS)}", entity="alert rule", key=fields["kind"])
    for name in ("threshold", "for_seconds", "renotify_seconds", "window_seconds"):
        if fields[name] < 0:
            raise InvalidValue(f"{name} must not be negative", entity="alert rule", key=name)


class AlertRepository:
    """Rules, states and events of the alerts, on the database of `meta`."""

    def __init__(self, meta: MetaStore) -> None:
        self._sessions = sessionmaker(meta.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(meta.engine.execution_options(**{IMMEDIATE: True}),
                                            expire_on_commit=False)

    # --- rules ----------------------------------------------------------------------------------

    def list_rules(self) -> list[AlertRuleRow]:
        with self._sessions() as s:
            return [_rule_row(r) for r in s.scalars(select(m.AlertRule).order_by(m.AlertRule.id))]

    def get_rule(self, id: int) -> AlertRuleRow:
        with self._sessions() as s:
            row = s.get(m.AlertRule, id)
            if row is None:
                raise NotFound(f"alert rule {id} does not exist", entity="alert rule", key=id)
            return _rule_row(row)

    def put_rule(self, id: int | None, **fields: Any) -> tuple[AlertRuleRow, bool]:
        """Create a rule (a new id when `id` is None) or replace rule `id`; True when created.
        Replacing a rule forgets the states of its alerts, as its meaning may have changed."""
        fields = {"queue": "*", "group": "*", "for_seconds": 0.0, "renotify_seconds": 3600.0,
                  "window_seconds": 300.0, "recipients": [], "enabled": True, **fields}
        unknown = set(fields) - set(RULE_FIELDS)
        if unknown:
            raise InvalidValue(f"unknown rule fields: {', '.join(sorted(unknown))}", entity="alert rule", key=id)
        _check_rule(fields)
        fields["recipients"] = list(fields["recipients"])
        with self._write_sessions.begin() as s:
            row = s.get(m.AlertRule, id) if id is not None else None
            created = row is None
            if id is None:
                id = _next_rule_id(s)
            if row is None:
                row = m.AlertRule(id=id, **fields)
                s.add(row)
            else:
                for name, value in fields.items():
                    setattr(row, name, value)
                row.updated_at = utcnow()
                s.execute(delete(m.AlertState).where(m.AlertState.rule_id == id))
            s.flush()
            return _rule_row(row), created

    def delete_rule(self, id: int) -> None:
        with self._write_sessions.begin() as s:
            if s.execute(delete(m.AlertRule).where(m.AlertRule.id == id)).rowcount == 0:
                raise NotFound(f"alert rule {id} does not exist", entity="alert rule", key=id)

    # --- states ---------------------------------------------------------------------------------

    def load_states(self) -> list[AlertStateRow]:
        with self._sessions() as s:
            return [_state_row(r) for r in s.scalars(select(m.AlertState))]

    def save(self, states: Sequence[AlertStateRow], gone: Iterable[tuple[int, str, str]],
             events: Sequence[NewAlertEvent], mails: Sequence[NewOutboxMail] = ()) -> list[int]:
        """In one transaction: upsert `states`, delete the states keyed in `gone`, append `events`,
        queue `mails` in the outbox (returns their ids, in order). States of rules deleted meanwhile
        are skipped. One transaction: a crash never keeps a transition without its mail, or the reverse."""
        key = tuple_(m.AlertState.rule_id, m.AlertState.queue, m.AlertState.group)
        with self._write_sessions.begin() as s:
            rule_ids = set(s.scalars(select(m.AlertRule.id)))
            rows = [{f: getattr(st, f) for f in AlertStateRow.__slots__} for st in states if st.rule_id in rule_ids]
            # Replace = delete + one executemany insert: a handful of statements however many states.
            drop = [*gone, *((r["rule_id"], r["queue"], r["group"]) for r in rows)]
            if drop:
                s.execute(delete(m.AlertState).where(key.in_(drop)))
            if rows:
                s.execute(insert(m.AlertState), rows)
            _add_events(s, events)
            queued = [m.AlertMail(at_ms=x.at_ms, recipients=list(x.recipients), notice=x.notice) for x in mails]
            s.add_all(queued)
            s.flush()
            return [q.id for q in queued]

    # --- outbox ---------------------------------------------------------------------------------

    def outbox(self) -> list[OutboxRow]:
        """Every notice waiting to be mailed, oldest first."""
        with self._sessions() as s:
            return [OutboxRow(o.id, o.at_ms, tuple(o.recipients), o.notice, o.attempts, o.next_at_ms)
                    for o in s.scalars(select(m.AlertMail).order_by(m.AlertMail.id))]

    def mail_done(self, ids: Sequence[int], events: Sequence[NewAlertEvent]) -> None:
        """Sent (or given up): the notices leave the outbox, in the transaction that records it."""
        with self._write_sessions.begin() as s:
            s.execute(delete(m.AlertMail).where(m.AlertMail.id.in_(ids)))
            _add_events(s, events)

    def mail_failed(self, ids: Sequence[int], attempts: int, next_at_ms: int,
                    events: Sequence[NewAlertEvent]) -> None:
        """An attempt failed: remember how many were made and when the next may be."""
        with self._write_sessions.begin() as s:
            s.execute(update(m.AlertMail).where(m.AlertMail.id.in_(ids))
                      .values(attempts=attempts, next_at_ms=next_at_ms))
            _add_events(s, events)

    # --- events ---------------------------------------------------------------------------------

    def add_events(self, events: Sequence[NewAlertEvent]) -> None:
        self.save((), (), events)

    def prune_events(self, before_ms: int) -> int:
        """Delete the events older than `before_ms`; returns how many."""
        with self._write_sessions.begin() as s:
            return int(s.execute(delete(m.AlertEvent).where(m.AlertEvent.at_ms < before_ms)).rowcount)

    def events(self, *, state: str | None = None, since_ms: int | None = None, rule_id: int | None = None,
               queue: str | None = None, limit: int = 500) -> list[AlertEventRow]:
        """Newest first."""
        q = select(m.AlertEvent).order_by(m.AlertEvent.id.desc()).limit(limit)
        if state:
            q = q.where(m.AlertEvent.state == state)
        if since_ms is not None:
            q = q.where(m.AlertEvent.at_ms >= since_ms)
        if rule_id is not None:
            q = q.where(m.AlertEvent.rule_id == rule_id)
        if queue:
            q = q.where(m.AlertEvent.queue == queue)
        with self._sessions() as s:
            return [_event_row(r) for r in s.scalars(q)]
