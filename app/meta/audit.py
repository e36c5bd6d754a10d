"""The audit log in the metadata database: appending entries, reading them back page by page, and
pruning the old ones. What is recorded, and when, is decided above (app/broker/audit.py).

`AuditRepository` shares the MetaStore's engine; every method runs in its own short session (safe
from worker threads). Entries are read newest first; a page's cursor is the id of its last entry,
and the next page holds the entries with smaller ids, so pages neither skip nor repeat while new
entries are appended.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import sessionmaker

from chunkmq.meta import models as m
from chunkmq.meta.engine import IMMEDIATE
from chunkmq.meta.repository import MetaStore

SOURCES = m.AUDIT_SOURCES
# Column widths (app/meta/models.py): longer values are cut, never refused (a record must not fail).
_WIDTHS = {"who": m.NAME_MAX, "address": 64, "action": 64, "result": 64, "resource": 1000}


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An entry to append. `result` is "ok" or the API error code of the failure."""

    at_ms: int
    source: str  # api | console | cli
    who: str  # the token's name, the console user, the OS user of the CLI; "" when unknown
    address: str  # the client's address; "local" for the CLI
    action: str  # "<object>.<verb>", e.g. queue.purge, login
    resource: str  # the object's name(s), e.g. "orders" or "orders/billing"; "" when none
    result: str


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at_ms: int
    source: str
    who: str
    address: str
    action: str
    resource: str
    result: str


def _row(o: m.AuditEntry) -> AuditRow:
    return AuditRow(o.id, o.at_ms, o.source, o.who, o.address, o.action, o.resource, o.result)


class AuditRepository:
    """The audit log on the database of `meta`."""

    def __init__(self, meta: MetaStore) -> None:
        self._sessions = sessionmaker(meta.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(meta.engine.execution_options(**{IMMEDIATE: True}),
                                            expire_on_commit=False)

    def add(self, record: AuditRecord) -> None:
        if record.source not in SOURCES:
            raise ValueError(f"audit source must be one of {SOURCES}, not {record.source!r}")
        values = {f: getattr(record, f) for f in AuditRecord.__slots__}
        for field, width in _WIDTHS.items():
            values[field] = values[field][:width]
        with self._write_sessions.begin() as s:
            s.execute(insert(m.AuditEntry), [values])

    def entries(self, *, who: str | None = None, action: str | None = None, since_ms: int | None = None,
                until_ms: int | None = None, before_id: int | None = None, limit: int = 100) -> list[AuditRow]:
        """Newest first: at most `limit` entries with an id below `before_id` (the previous page's
        cursor), by `who` exactly, of `action` exactly (or of every action under it: "queue" is
        queue.declare, queue.purge, ...), at or after `since_ms` and before `until_ms`."""
        e = m.AuditEntry
        q = select(e).order_by(e.id.desc()).limit(limit)
        if who is not None:
            q = q.where(e.who == who)
        if action:
            q = q.where((e.action == action) | e.action.startswith(action + ".", autoescape=True))
        if since_ms is not None:
            q = q.where(e.at_ms >= since_ms)
        if until_ms is not None:
            q = q.where(e.at_ms < until_ms)
        if before_id is not None:
            q = q.where(e.id < before_id)
        with self._sessions() as s:
            return [_row(r) for r in s.scalars(q)]

    def prune(self, before_ms: int) -> int:
        """Delete the entries older than `before_ms`; returns how many."""
        with self._write_sessions.begin() as s:
            return int(s.execute(delete(m.AuditEntry).where(m.AuditEntry.at_ms < before_ms)).rowcount)
