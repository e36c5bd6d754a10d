"""The audit log's table and queries (app/meta/audit.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from chunkmq.meta import MetaStore
from chunkmq.meta.audit import AuditRecord, AuditRepository


def _add(repo: AuditRepository, at: int, who: str = "ops", action: str = "queue.purge", result: str = "ok") -> None:
    repo.add(AuditRecord(at, "api", who, "10.0.0.1", action, "orders", result))


def test_entries_come_back_newest_first_with_what_was_recorded(store: MetaStore) -> None:
    repo = AuditRepository(store)
    _add(repo, 1000)
    _add(repo, 2000, who="", action="login", result="unauthorized")
    rows = repo.entries()
    assert [(r.at_ms, r.action, r.who, r.result) for r in rows] == [(2000, "login", "", "unauthorized"),
                                                                    (1000, "queue.purge", "ops", "ok")]
    assert rows[1].source == "api" and rows[1].address == "10.0.0.1" and rows[1].resource == "orders"
    assert rows[0].id > rows[1].id


def test_filters_combine_and_an_object_names_all_its_actions(store: MetaStore) -> None:
    repo = AuditRepository(store)
    for at, who, action in [(1, "a", "queue.declare"), (2, "b", "queue.purge"), (3, "a", "queuex.odd"),
                            (4, "a", "token.create"), (5, "a", "queue.delete")]:
        _add(repo, at, who, action)
    assert [r.at_ms for r in repo.entries(action="queue")] == [5, 2, 1]  # not queuex.odd
    assert [r.at_ms for r in repo.entries(action="queue.purge")] == [2]
    assert [r.at_ms for r in repo.entries(who="a", action="queue")] == [5, 1]
    assert [r.at_ms for r in repo.entries(since_ms=2, until_ms=5)] == [4, 3, 2]
    assert repo.entries(action="queue_") == []  # LIKE's wildcards are plain characters


def test_pages_by_cursor_neither_skip_nor_repeat_while_entries_are_added(store: MetaStore) -> None:
    repo = AuditRepository(store)
    for at in range(10):
        _add(repo, at)
    first = repo.entries(limit=4)
    _add(repo, 99)  # a new entry between two pages
    second = repo.entries(limit=4, before_id=first[-1].id)
    third = repo.entries(limit=4, before_id=second[-1].id)
    assert [r.at_ms for r in first + second + third] == list(range(9, -1, -1))


def test_prune_deletes_only_the_older_entries(store: MetaStore) -> None:
    repo = AuditRepository(store)
    for at in (100, 200, 300):
        _add(repo, at)
    assert repo.prune(250) == 2
    assert [r.at_ms for r in repo.entries()] == [300]


def test_long_values_are_cut_and_an_unknown_source_refused(store: MetaStore) -> None:
    repo = AuditRepository(store)
    repo.add(AuditRecord(1, "console", "u" * 500, "a" * 100, "x" * 100, "r" * 5000, "e" * 100))
    row = repo.entries()[0]
    assert (len(row.who), len(row.address), len(row.action), len(row.resource), len(row.result)) == (
        200, 64, 64, 1000, 64)
    with pytest.raises(ValueError, match="source"):
        repo.add(AuditRecord(1, "smtp", "u", "", "login", "", "ok"))
