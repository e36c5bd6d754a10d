"""The tier manifest (app/meta/tier.py) on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from chunkmq.meta import MetaStore
from chunkmq.meta.tier import EVICTED, LOCAL, UPLOADED, UPLOADING, TierManifest


def test_put_replaces_and_remove_deletes(store: MetaStore) -> None:
    manifest = TierManifest(store)
    assert manifest.rows() == {}
    manifest.put(3, 3, "log/a", 100, "", UPLOADING)
    manifest.put(1, 2, "log/b", 50, "ab" * 16, UPLOADED)
    row = manifest.put(3, 5, "log/c", 120, "cd" * 16, UPLOADED)
    rows = manifest.rows()
    assert list(rows) == [1, 3]
    assert rows[3] == row and (row.last, row.object_key, row.size, row.state) == (5, "log/c", 120, UPLOADED)
    assert row.updated_ms > 0
    manifest.remove([1, 7])
    manifest.remove([])
    assert list(manifest.rows()) == [3]


def test_states_are_the_four(store: MetaStore) -> None:
    manifest = TierManifest(store)
    for n, state in enumerate((LOCAL, UPLOADING, UPLOADED, EVICTED)):
        manifest.put(n, n, f"log/{n}", 1, "", state)
    assert [r.state for r in manifest.rows().values()] == ["local", "uploading", "uploaded", "evicted"]
    with pytest.raises(ValueError, match="tier state"):
        manifest.put(9, 9, "log/9", 1, "", "lost")


def test_the_database_refuses_other_states(store: MetaStore) -> None:
    from sqlalchemy import insert

    from chunkmq.meta.models import TierChunk

    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(insert(TierChunk).values(number=1, last=1, object_key="k", size=1, state="lost", updated_ms=0))
