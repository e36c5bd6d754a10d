"""Exchanges and queues: round trips through a real SQLite file and a real PostgreSQL database,
uniqueness, id allocation."""

from __future__ import annotations

from datetime import UTC

import pytest
from sqlalchemy.exc import DataError, IntegrityError

from chunkmq.meta import AlreadyExists, InvalidValue, MetaStore, NotFound, QueueRow


def test_exchange_round_trip(store: MetaStore) -> None:
    created = store.create_exchange("orders", "topic", alternate_exchange="unrouted")
    assert (created.name, created.type, created.alternate_exchange) == ("orders", "topic", "unrouted")
    assert created.created_at.tzinfo == UTC
    store.create_exchange("fan", "fanout")
    loaded = store.load().exchanges
    assert loaded[0] == created
    assert [e.name for e in loaded] == ["orders", "fan"]


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers", "hash"])
def test_every_exchange_type_is_accepted(store: MetaStore, kind: str) -> None:
    assert store.create_exchange(f"x-{kind}", kind).type == kind


def test_duplicate_exchange_is_already_exists_from_the_integrity_error(store: MetaStore) -> None:
    store.create_exchange("orders", "direct")
    with pytest.raises(AlreadyExists) as info:
        store.create_exchange("orders", "fanout")
    assert (info.value.entity, info.value.key) == ("exchange", "orders")
    assert isinstance(info.value.__cause__, IntegrityError)
    assert [e.type for e in store.load().exchanges] == ["direct"]


@pytest.mark.parametrize("name", ["", "x" * 201])
def test_exchange_name_length_is_checked_by_the_database(store: MetaStore, name: str) -> None:
    with pytest.raises(InvalidValue) as info:
        store.create_exchange(name, "direct")
    # SQLite: the CHECK constraint; PostgreSQL checks a VARCHAR's length first (a data error)
    assert isinstance(info.value.__cause__, IntegrityError | DataError)
    store.create_exchange("x" * 200, "direct")  # the longest allowed


def test_unknown_exchange_type_is_invalid(store: MetaStore) -> None:
    with pytest.raises(InvalidValue, match="type must be one of"):
        store.create_exchange("orders", "x-delayed")


def test_delete_exchange(store: MetaStore) -> None:
    store.create_exchange("orders", "direct")
    store.delete_exchange("orders")
    assert store.load().exchanges == ()
    with pytest.raises(NotFound):
        store.delete_exchange("orders")


def test_queue_defaults(store: MetaStore) -> None:
    q = store.create_queue("jobs")
    assert q == QueueRow(
        id=q.id, name="jobs", max_messages=None, max_bytes=None, max_age_seconds=None, overflow="drop_head",
        dead_letter_exchange=None, dead_letter_routing_key=None, max_deliveries=None, ack_timeout_ms=30_000,
        producer_visible=True, consumer_visible=True, created_at=q.created_at,
    )
    assert store.load().queues == (q,)


def test_queue_round_trip_with_every_setting(store: MetaStore) -> None:
    q = store.create_queue(
        "jobs", max_messages=10, max_bytes=2**40, max_age_seconds=3600, overflow="reject_publish",
        dead_letter_exchange="dlx", dead_letter_routing_key="jobs.dead", max_deliveries=5, ack_timeout_ms=1000,
        producer_visible=False, consumer_visible=False,
    )
    assert store.load().queues == (q,)
    assert (q.max_bytes, q.overflow, q.dead_letter_routing_key, q.producer_visible) == (
        2**40, "reject_publish", "jobs.dead", False,
    )


def test_update_queue(store: MetaStore) -> None:
    q = store.create_queue("jobs")
    updated = store.update_queue("jobs", producer_visible=False, max_messages=100, overflow="reject_publish")
    assert (updated.id, updated.producer_visible, updated.max_messages, updated.overflow) == (
        q.id, False, 100, "reject_publish",
    )
    assert updated.created_at == q.created_at
    assert store.load().queues == (updated,)


def test_update_queue_rejects_unknown_fields_values_and_queues(store: MetaStore) -> None:
    store.create_queue("jobs")
    with pytest.raises(InvalidValue, match="cannot update id, name"):
        store.update_queue("jobs", name="other", id=7)
    with pytest.raises(InvalidValue, match="overflow"):
        store.update_queue("jobs", overflow="drop_tail")
    with pytest.raises(NotFound):
        store.update_queue("nope", max_messages=1)


def test_duplicate_queue(store: MetaStore) -> None:
    store.create_queue("jobs")
    with pytest.raises(AlreadyExists, match="queue 'jobs' already exists"):
        store.create_queue("jobs", max_messages=5)


def test_queue_ids_are_never_reused(store: MetaStore, meta_url: str) -> None:
    q1 = store.create_queue("q1")
    store.delete_queue("q1")
    q2 = store.create_queue("q2")
    assert q2.id > q1.id
    store.delete_queue("q2")
    # Also not after the newest id was deleted and the database reopened.
    with MetaStore(meta_url) as reopened:
        q3 = reopened.create_queue("q1")
    assert q3.id > q2.id


def test_delete_missing_queue(store: MetaStore) -> None:
    with pytest.raises(NotFound) as info:
        store.delete_queue("nope")
    assert (info.value.entity, info.value.key) == ("queue", "nope")


def test_rows_are_frozen(store: MetaStore) -> None:
    q = store.create_queue("jobs")
    with pytest.raises(AttributeError):
        q.name = "other"  # type: ignore[misc]
