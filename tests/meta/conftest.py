from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chunkmq.meta import GroupState, MetaStore, upgrade
from tests.pg import PgCluster

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite file in tmp_path (for what only SQLite has: file modes, PRAGMAs, its DDL)."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=BACKENDS)
def meta_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database: a SQLite file in tmp_path, or a new database on the test PostgreSQL server."""
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_url")
        return
    pg: PgCluster = request.getfixturevalue("pg")
    with pg.database(migrated=True) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database never migrated: a new SQLite file, or a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    pg: PgCluster = request.getfixturevalue("pg")
    with pg.database() as url:
        yield url


@pytest.fixture
def store(meta_url: str) -> Iterator[MetaStore]:
    with MetaStore(meta_url) as meta:
        yield meta


def floors(items: list[tuple[int, str, int]]) -> list[GroupState]:
    """Group states that are only a floor (nothing done above it)."""
    return [GroupState(queue_id, name, floor, floor, (), 0) for queue_id, name, floor in items]
