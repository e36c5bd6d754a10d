"""app/meta/models.py on a real, migrated SQLite file: the constraints the models declare hold in the
database itself (not only in the broker's checks), and deletes cascade as the models say."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session

from chunkmq.meta import models
from chunkmq.meta.engine import make_engine


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


def _add(engine: Engine, *rows: models.Base) -> None:
    with Session(engine) as s, s.begin():
        s.add_all(rows)


@pytest.mark.parametrize("row", [
    models.Exchange(name="", type="direct"),
    models.Exchange(name="x" * (models.NAME_MAX + 1), type="direct"),
    models.Exchange(name="e", type="round_robin"),
    models.Queue(name="q", overflow="drop_tail"),
    models.AlertRule(kind="lag_messages", threshold=-1),
    models.AlertRule(kind="cpu", threshold=1),
], ids=["empty-name", "long-name", "exchange-type", "overflow", "negative-threshold", "alert-kind"])
def test_the_database_refuses_values_outside_the_declared_sets(engine: Engine, row: models.Base) -> None:
    with pytest.raises(IntegrityError):
        _add(engine, row)


def test_defaults_of_a_new_queue(engine: Engine) -> None:
    _add(engine, models.Queue(name="q"))
    with Session(engine) as s:
        q = s.scalars(select(models.Queue)).one()
        assert (q.overflow, q.ack_timeout_ms, q.producer_visible, q.consumer_visible, q.messages_dropped) == (
            "drop_head", models.DEFAULT_ACK_TIMEOUT_MS, True, True, 0)
        assert q.created_at.tzinfo is UTC  # read back aware although SQLite keeps no offset


def test_a_naive_datetime_is_refused(engine: Engine) -> None:
    with pytest.raises(StatementError, match="naive datetime"):
        _add(engine, models.Queue(name="q", created_at=datetime(2026, 1, 1)))


def test_bindings_are_unique_over_equal_arguments_in_any_key_order(engine: Engine) -> None:
    _add(engine, models.Exchange(name="e", type="headers"), models.Queue(name="q"))
    _add(engine, models.Binding(exchange="e", queue="q", arguments={"a": "1", "b": "2"}))
    with pytest.raises(IntegrityError):
        _add(engine, models.Binding(exchange="e", queue="q", arguments={"b": "2", "a": "1"}))
    _add(engine, models.Binding(exchange="e", queue="q", arguments={"a": "1"}))  # other arguments: a new binding


def test_deleting_a_queue_deletes_its_bindings_groups_and_history(engine: Engine) -> None:
    _add(engine, models.Exchange(name="e", type="direct"), models.Queue(name="q"))
    with Session(engine) as s:
        qid = s.scalars(select(models.Queue.id)).one()
    _add(engine, models.Binding(exchange="e", queue="q"), models.Group(queue_id=qid, name="g"))
    with Session(engine) as s, s.begin():
        s.add_all([
            models.QueueHistory(queue_id=qid, step_ms=5000, t=1, messages=0, bytes=0, publish_rate=0, deliver_rate=0),
            models.GroupHistory(queue_id=qid, group_name="g", step_ms=5000, t=1, lag=0, lag_seconds=0, ack_rate=0,
                                consumers=0, ack_floor=0, floor_moved_at=0),
        ])
    with Session(engine) as s, s.begin():
        s.delete(s.get_one(models.Queue, qid))
    with Session(engine) as s:
        for model in (models.Binding, models.Group, models.QueueHistory, models.GroupHistory):
            assert s.scalar(select(func.count()).select_from(model)) == 0, model
        assert s.scalar(select(func.count()).select_from(models.Exchange)) == 1  # the exchange stays


def test_a_deleted_queues_id_is_never_handed_out_again(engine: Engine) -> None:
    """Queue storage directories are named by id: a reused id would bring back a deleted queue's files."""
    _add(engine, models.Queue(name="a"), models.Queue(name="b"))
    with Session(engine) as s, s.begin():
        s.delete(s.scalars(select(models.Queue).where(models.Queue.name == "b")).one())
    _add(engine, models.Queue(name="c"))
    with Session(engine) as s:
        assert list(s.scalars(select(models.Queue.id).order_by(models.Queue.id))) == [1, 3]
