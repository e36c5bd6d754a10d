"""SQLite connections: WAL, foreign keys, and real transactions (reads share one snapshot, writers
wait for each other instead of failing)."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from chunkmq.meta import MetaStore
from chunkmq.meta.models import Queue
from tests.meta.conftest import floors


def test_sqlite_connections_use_wal_and_foreign_keys(sqlite_url: str) -> None:
    with MetaStore(sqlite_url) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_a_read_transaction_is_one_snapshot(store: MetaStore, meta_url: str) -> None:
    count = select(func.count()).select_from(Queue)
    with store.engine.connect() as conn, conn.begin():
        assert conn.execute(count).scalar() == 0
        with MetaStore(meta_url) as other:
            other.create_queue("jobs")
        assert conn.execute(count).scalar() == 0  # still the snapshot the transaction began with
    with store.engine.connect() as conn:
        assert conn.execute(count).scalar() == 1


def test_concurrent_writers_wait_instead_of_failing(store: MetaStore) -> None:
    """Bindings read (do both ends exist?) before they write; with a deferred BEGIN such a transaction
    fails with "database is locked" when another writer commits in between."""
    store.create_exchange("x", "direct")
    queues = [store.create_queue(f"q{i}") for i in range(4)]
    for q in queues:
        store.upsert_group(q.id, "g")
    errors: list[BaseException] = []

    def run(work: list[tuple[str, tuple[object, ...]]]) -> None:
        try:
            for method, args in work:
                getattr(store, method)(*args)
        except BaseException as e:
            errors.append(e)

    jobs = [
        [("save_group_states", (floors([(q.id, "g", f) for q in queues]),)) for f in range(1, 101)],
        [("create_binding", ("x", queues[i % 4].name, f"k{i}")) for i in range(100)],
        [("create_queue", (f"extra{i}",)) for i in range(100)],
        [("upsert_group", (queues[i % 4].id, f"h{i}")) for i in range(100)],
    ]
    threads = [threading.Thread(target=run, args=(work,)) for work in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    snapshot = store.load()
    assert (len(snapshot.bindings), len(snapshot.queues), len(snapshot.groups)) == (100, 104, 104)
    assert {g.ack_floor for g in snapshot.groups if g.name == "g"} == {100}
