from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chunkmq.meta import GroupState, MetaStore, upgrade


@pytest.fixture
def meta_url(tmp_path: Path) -> str:
    """A migrated SQLite file in tmp_path."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    return url


@pytest.fixture
def store(meta_url: str) -> Iterator[MetaStore]:
    with MetaStore(meta_url) as meta:
        yield meta


def floors(items: list[tuple[int, str, int]]) -> list[GroupState]:
    """Group states that are only a floor (nothing done above it)."""
    return [GroupState(queue_id, name, floor, floor, (), 0) for queue_id, name, floor in items]
