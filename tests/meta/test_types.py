"""Column types (app/meta/types.py) through a real SQLite table: datetimes come back aware and in
UTC, naive ones are refused, and JSON is stored in one canonical spelling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import StatementError

from chunkmq.meta.types import CanonicalJSON, UtcDateTime, canonical_json


@pytest.fixture
def table(tmp_path: Path) -> tuple[Table, Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    meta = MetaData()
    t = Table("t", meta, Column("id", Integer, primary_key=True), Column("at", UtcDateTime()),
              Column("doc", CanonicalJSON()))
    meta.create_all(engine)
    return t, engine


def test_datetimes_come_back_aware_in_utc(table: tuple[Table, Engine]) -> None:
    t, engine = table
    paris = datetime(2026, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    with engine.begin() as c:
        c.execute(insert(t).values(id=1, at=paris, doc=None))
        c.execute(insert(t).values(id=2, at=None, doc=None))
        rows = c.execute(select(t.c.at).order_by(t.c.id)).scalars().all()
    assert rows == [datetime(2026, 6, 1, 12, 0, tzinfo=UTC), None] and rows[0].tzinfo is UTC
    with pytest.raises(StatementError, match="naive datetime"), engine.begin() as c:
        c.execute(insert(t).values(id=3, at=datetime(2026, 1, 1)))


def test_json_is_stored_canonical_and_read_back(table: tuple[Table, Engine]) -> None:
    t, engine = table
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'
    with engine.begin() as c:
        c.execute(insert(t).values(id=1, doc={"b": 2, "a": 1}))
        stored = c.execute(text("SELECT doc FROM t")).scalar()
        read = c.execute(select(t.c.doc)).scalar()
    assert stored == '{"a":1,"b":2}' and read == {"a": 1, "b": 2}
