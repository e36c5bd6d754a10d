"""app/meta/rows.py: ORM instances become frozen plain values that share nothing mutable with the
session (the broker keeps them after the session is gone)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from chunkmq.meta import models, rows
from chunkmq.meta.engine import make_engine

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_group_read_back_from_the_database_has_tuples_of_int_ranges(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with Session(engine) as s, s.begin():
            s.add(models.Queue(id=7, name="q"))
            s.flush()
            s.add_all([models.Group(queue_id=7, name="g", ack_floor=10, tag_filter=["b", "a"], next_offset=15,
                                    done=[[11, 13], [14, 15]], missed=2),
                       models.Group(queue_id=7, name="h")])
        with Session(engine) as s:
            g, h = (rows.group_row(o) for o in s.scalars(select(models.Group).order_by(models.Group.name)))
    finally:
        engine.dispose()
    assert (g.queue_id, g.name, g.ack_floor, g.tag_filter, g.next_offset, g.done, g.missed) == (
        7, "g", 10, ("b", "a"), 15, ((11, 13), (14, 15)), 2)
    assert (h.tag_filter, h.next_offset, h.done, h.start) == (None, None, (), "earliest")


def test_a_binding_row_owns_its_arguments() -> None:
    orm = models.Binding(id=1, exchange="e", queue="q", routing_key="k", arguments={"x": "1"}, created_at=T)
    row = rows.binding_row(orm)
    orm.arguments["x"] = "changed"
    assert row.arguments == {"x": "1"}


def test_rows_are_frozen_and_carry_every_column() -> None:
    q = rows.queue_row(models.Queue(
        id=3, name="q", max_messages=5, max_bytes=None, max_age_seconds=60, overflow="reject_publish",
        dead_letter_exchange="dlx", dead_letter_routing_key=None, max_deliveries=4, ack_timeout_ms=1000,
        producer_visible=False, consumer_visible=True, created_at=T, messages_dropped=9))
    assert q == rows.QueueRow(3, "q", 5, None, 60, "reject_publish", "dlx", None, 4, 1000, False, True, T, 9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.name = "other"  # type: ignore[misc]
    token = rows.token_row(models.Token(id=1, name="ci", prefix="abcd1234", token_hash="h", is_admin=False,
                                        configure="^q$", write="", read=".*", created_at=T, last_used_at=None))
    assert not hasattr(token, "token_hash")  # a token's hash never leaves app/meta
    assert (token.prefix, token.configure, token.write, token.read) == ("abcd1234", "^q$", "", ".*")
    user = rows.user_row(models.User(id=2, name="ann", password_hash="x", is_admin=True, created_at=T))
    assert user == rows.UserRow(2, "ann", True, T)
    assert rows.exchange_row(models.Exchange(id=4, name="e", type="topic", alternate_exchange="ae", created_at=T)) == \
        rows.ExchangeRow(4, "e", "topic", "ae", T)
