"""The metadata a server's first stage needs, read with the standard library's sqlite3 instead of
SQLAlchemy's ORM (whose import is a third of a start: docs/benchmarks.md, W6).

A staged start (app/start.py) answers its first requests with the broker loaded from `PlainMeta.load`
and tokens found by `PlainMeta.find_token`; the ORM's MetaStore (app/meta/repository.py) takes over
once it is built. Both give the same rows (tests/meta/test_plain.py holds them to it). Only reads are
done here, and only of a SQLite database already at the newest schema with its first admin token
and console user: `PlainMeta.open` says None for anything else (a first start, a migration,
PostgreSQL), and the server then starts the ORM's way.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from chunkmq.auth.tokens import TOKEN_PREFIX, hash_token
from chunkmq.meta.rows import BindingRow, ExchangeRow, GroupRow, MetaSnapshot, QueueRow, TokenRow
from chunkmq.resources import MIGRATIONS

_SQLITE = "sqlite:///"


def head_revision(scripts: Path = MIGRATIONS) -> str:
    """The newest migration's revision, read off the file names: the scripts are numbered
    (alembic/versions/NNNN_<message>.py with revision "NNNN", each revising the one before; a test
    in tests/meta/test_migrations.py holds them to it), so the highest number is the head."""
    numbers = [int(p.name[:4]) for p in (scripts / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")]
    return f"{max(numbers):04d}"


def _time(value: str | None) -> datetime | None:
    """SQLAlchemy's SQLite spelling of a datetime (no offset: UTC by contract, app/meta/types.py)."""
    return None if value is None else datetime.fromisoformat(value + "+00:00")  # 8x replace(tzinfo=UTC)'s speed


def _json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


class PlainMeta:
    """Reads of the SQLite metadata database at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def open(cls, url: str, *, tokens: bool) -> PlainMeta | None:
        """A reader of the database at `url`, or None when a start must write it first or it is not a
        plain SQLite file: it is missing, behind the newest migration, or without a console user or
        (with `tokens`, auth on) an API token, all of which the ORM's start creates."""
        path = url.removeprefix(_SQLITE)
        if not url.startswith(_SQLITE) or "?" in path or path in ("", ":memory:") or not Path(path).is_file():
            return None
        reader = cls(Path(path))
        try:
            with reader._reading() as db:
                if db.execute("SELECT version_num FROM alembic_version").fetchall() != [(head_revision(),)]:
                    return None
                needed = ("users", "tokens") if tokens else ("users",)
                if any(db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None for table in needed):
                    return None
        except sqlite3.Error:  # no tables yet, or not a database: the ORM's start says what is wrong
            return None
        return reader

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same snapshot."""
        with closing(sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)) as db:
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("ROLLBACK")

    def load(self) -> MetaSnapshot:
        """Exchanges, queues, bindings and groups, each ordered by id (MetaStore.load's rows)."""
        with self._reading() as db:
            exchanges = tuple(
                ExchangeRow(id, name, type, alternate, _time(created))
                for id, name, type, alternate, created in db.execute(
                    "SELECT id, name, type, alternate_exchange, created_at FROM exchanges ORDER BY id"))
            queues = tuple(
                QueueRow(id=r[0], name=r[1], max_messages=r[2], max_bytes=r[3], max_age_seconds=r[4], overflow=r[5],
                         dead_letter_exchange=r[6], dead_letter_routing_key=r[7], max_deliveries=r[8],
                         ack_timeout_ms=r[9], producer_visible=bool(r[10]), consumer_visible=bool(r[11]),
                         created_at=_time(r[12]), messages_dropped=r[13],
                         message_ttl_seconds=r[14])
                for r in db.execute(
                    "SELECT id, name, max_messages, max_bytes, max_age_seconds, overflow, dead_letter_exchange, "
                    "dead_letter_routing_key, max_deliveries, ack_timeout_ms, producer_visible, consumer_visible, "
                    "created_at, messages_dropped, message_ttl_seconds FROM queues ORDER BY id"))
            bindings = tuple(
                BindingRow(id, exchange, queue, key, dict(_json(arguments) or {}), _time(created))
                for id, exchange, queue, key, arguments, created in db.execute(
                    "SELECT id, exchange, queue, routing_key, arguments, created_at FROM bindings ORDER BY id"))
            groups = tuple(self._group(r) for r in db.execute(
                "SELECT id, queue_id, name, ack_floor, start, tag_filter, created_at, updated_at, missed, "
                "next_offset, done, paused, paused_until_ms, single_active_consumer FROM groups ORDER BY id"))
        return MetaSnapshot(exchanges, queues, bindings, groups)

    @staticmethod
    def _group(r: Any) -> GroupRow:
        tags = _json(r[5])
        done = tuple((int(a), int(b)) for a, b in _json(r[10]) or ())
        return GroupRow(r[0], r[1], r[2], r[3], r[4], None if tags is None else tuple(tags),
                        _time(r[6]), _time(r[7]), r[8], r[9], done, bool(r[11]), r[12], bool(r[13]))

    def find_token(self, plain: str) -> TokenRow | None:
        """The token whose plain text is `plain`, or None (MetaStore.find_token's row)."""
        if not plain.startswith(TOKEN_PREFIX):
            return None
        with self._reading() as db:
            r = db.execute("SELECT id, name, prefix, is_admin, configure, write, read, created_at, last_used_at "
                           "FROM tokens WHERE token_hash = ?", (hash_token(plain),)).fetchone()
        if r is None:
            return None
        return TokenRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], _time(r[7]), _time(r[8]))
