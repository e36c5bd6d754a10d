"""Column types shared by the models and the migrations.

Both are TypeDecorators over plain SQL types, so a migration spells them as `sa.DateTime(timezone=True)`
and `sa.Text()` and autogenerate sees no difference.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Dialect, Integer, Text
from sqlalchemy.types import TypeDecorator

# 64-bit everywhere: SQLite's INTEGER already is (and must stay INTEGER for a rowid primary key);
# PostgreSQL's INTEGER is 32-bit, too small for offsets, byte limits and rule ids up to 2**63 - 1.
BigInt = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime. SQLite stores no offset, so values read back naive are UTC by contract."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware one")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def canonical_json(value: Any) -> str:
    """One spelling per value (sorted keys, no spaces), so equal objects compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class CanonicalJSON(TypeDecorator[Any]):
    """JSON stored as canonical text: a unique constraint over the column then means "equal objects".

    (The generic JSON type keeps the caller's key order, so {"a":1,"b":2} and {"b":2,"a":1} would both fit.)
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else canonical_json(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)
