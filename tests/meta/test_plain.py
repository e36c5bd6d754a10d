"""app/meta/plain.py: the metadata read with sqlite3 gives the ORM's rows (MetaStore.load,
find_token), and says None for a database a start must write first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from chunkmq.meta import GroupState, MetaStore
from chunkmq.meta.plain import PlainMeta, head_revision

PASSWORD = "a-long-enough-password"


def filled(url: str) -> MetaStore:
    """A database with one of everything the broker loads, NULLs and JSON columns both ways."""
    meta = MetaStore(url)
    meta.create_exchange("orders", "topic", alternate_exchange="lost")
    meta.create_exchange("lost", "fanout")
    plain_q = meta.create_queue("plain")
    meta.create_queue("capped", max_messages=10, max_bytes=4096, max_age_seconds=60, overflow="reject_publish",
                      dead_letter_exchange="lost", dead_letter_routing_key="dead", max_deliveries=3,
                      ack_timeout_ms=5000, producer_visible=False)
    meta.create_binding("orders", "plain", "eu.#")
    meta.create_binding("lost", "capped", "", {"x-match": "any", "kind": "ä"})
    meta.upsert_group(plain_q.id, "workers", tag_filter=["a", "b"], ack_floor=5)
    meta.upsert_group(plain_q.id, "audit", start="latest", single_active_consumer=True)
    meta.set_group_pause(plain_q.id, "audit", True, 1_900_000_000_000)
    meta.save_group_states([GroupState(plain_q.id, "workers", 7, 12, ((8, 10),), 2)], [(plain_q.id, 3)])
    return meta


def test_the_snapshot_and_tokens_are_the_orms(sqlite_url: str) -> None:
    with filled(sqlite_url) as meta:
        meta.create_user("admin", PASSWORD, is_admin=True)
        _, plain = meta.create_token("ci", write="^orders$", read=".*")
        admin, admin_plain = meta.create_token("ops", is_admin=True)
        meta.touch_token(admin.id)
        reader = PlainMeta.open(sqlite_url, tokens=True)
        assert reader is not None
        loaded = reader.load()
        assert loaded == meta.load()
        assert {len(loaded.exchanges), len(loaded.queues), len(loaded.bindings), len(loaded.groups)} == {2}
        workers = next(g for g in loaded.groups if g.name == "workers")
        assert (workers.ack_floor, workers.next_offset, workers.done, workers.tag_filter) == (
            7, 12, ((8, 10),), ("a", "b"))
        assert loaded.queues[0].created_at.tzinfo is not None and loaded.queues[0].messages_dropped == 3
        for token in (plain, admin_plain, plain + "x", "not-a-token"):
            assert reader.find_token(token) == meta.find_token(token)
        assert reader.find_token(admin_plain).last_used_at is not None  # type: ignore[union-attr]


def test_a_database_a_start_must_write_first_is_not_read(tmp_path: Path, sqlite_url: str) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert PlainMeta.open(missing, tokens=False) is None
    assert not (tmp_path / "none.db").exists()  # not created by asking
    assert PlainMeta.open(sqlite_url, tokens=False) is None  # no console user yet
    with MetaStore(sqlite_url) as meta:
        meta.create_user("admin", PASSWORD)
        assert PlainMeta.open(sqlite_url, tokens=False) is not None
        assert PlainMeta.open(sqlite_url, tokens=True) is None  # auth on and no token yet
        meta.create_token("ci")
        assert PlainMeta.open(sqlite_url, tokens=True) is not None
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with db:
        db.execute("UPDATE alembic_version SET version_num = ?", (f"{int(head_revision()) - 1:04d}",))
    db.close()
    assert PlainMeta.open(sqlite_url, tokens=False) is None  # behind the newest migration
    sqlite3.connect(tmp_path / "bare.db").close()  # a file without tables
    assert PlainMeta.open(f"sqlite:///{tmp_path / 'bare.db'}", tokens=False) is None
    for other in ("postgresql://u@localhost/db", f"{sqlite_url}?timeout=5", "sqlite://", "sqlite:///:memory:"):
        assert PlainMeta.open(other, tokens=False) is None
