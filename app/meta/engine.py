"""The one place an Engine is built, so the app, the CLI and Alembic all get the same settings: for
SQLite and for PostgreSQL, whose transactions are made to behave as SQLite's (docs/metadata.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

# Execution option: begin transactions with BEGIN IMMEDIATE (take the write lock up front).
IMMEDIATE = "chunkmq_sqlite_immediate"
# PostgreSQL: the transaction-level advisory lock every write transaction takes (any fixed number).
WRITE_LOCK = 0x63686E6B  # "chnk"


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # WAL: readers never block the writer (the broker's floor writer runs beside admin calls).
        # synchronous stays FULL: a declared queue must survive a power cut, or its id could be
        # handed out again while its storage files still exist.
        cursor.execute("PRAGMA journal_mode=WAL")
        # After each checkpoint the WAL is cut back to 1 MiB instead of keeping its largest size:
        # it counts against the disk budget like every other file in the data directory.
        cursor.execute("PRAGMA journal_size_limit=1048576")
        # and a checkpoint comes once it passes 1 MiB (256 pages of 4 KiB) rather than SQLite's 4 MiB,
        # so that a run of small commits (declares, bindings, their audit entries) cannot hold a few
        # MiB of a small budget.
        cursor.execute("PRAGMA wal_autocheckpoint=256")
        # SQLite enforces foreign keys (and so ON DELETE CASCADE) only when asked, per connection.
        cursor.execute("PRAGMA foreign_keys=ON")
        # A writer waits up to 30 s for another's transaction (sqlite3's default is 5 s): on a busy
        # disk a group-commit round and an admin call can hold the lock longer, and waiting beats
        # answering "database is locked".
        cursor.execute("PRAGMA busy_timeout=30000")
    finally:
        cursor.close()
    # The sqlite3 module would BEGIN only before the first INSERT/UPDATE/DELETE, leaving the reads
    # before it outside the transaction. Turn that off and BEGIN ourselves (_sqlite_on_begin).
    dbapi_connection.isolation_level = None


def _sqlite_on_begin(conn: Connection) -> None:
    # A write transaction that first reads would, with a plain (deferred) BEGIN, fail at once with
    # SQLITE_BUSY when another writer committed after its read: IMMEDIATE waits for the lock instead.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(IMMEDIATE) else "BEGIN")


def _postgresql_on_begin(conn: Connection) -> None:
    # Writers take one lock, as SQLite's BEGIN IMMEDIATE does: the repository's read-then-write
    # transactions (does the queue exist? the next rule id) then never interleave. READ COMMITTED,
    # so the statements after the lock see what the writer before committed.
    if conn.get_execution_options().get(IMMEDIATE):
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An Engine for `url` (any SQLAlchemy URL). SQLite connections get WAL, foreign keys on, and
    real transactions: BEGIN when one starts, BEGIN IMMEDIATE with the IMMEDIATE execution option.
    PostgreSQL transactions read one snapshot (REPEATABLE READ) and writers with the IMMEDIATE option
    wait for each other; a connection the server dropped (a restart) is replaced before use."""
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        kwargs = {"isolation_level": "REPEATABLE READ", "pool_pre_ping": True, **kwargs}
    engine = create_engine(url, **kwargs)
    if backend == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
    elif backend == "postgresql":
        event.listen(engine, "begin", _postgresql_on_begin)
    return engine
