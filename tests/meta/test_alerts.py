"""Alert rules in the metadata database (app/meta/alerts.py), on a real SQLite file."""

from __future__ import annotations

from chunkmq.meta import MetaStore
from chunkmq.meta.alerts import MAX_RULE_ID, AlertRepository


def test_a_new_rule_after_a_put_of_the_largest_id_takes_a_free_one(store: MetaStore) -> None:
    repo = AlertRepository(store)
    first, created = repo.put_rule(None, kind="disk", threshold=90.0)  # after the rules a migration made
    assert created and first.id == max(r.id for r in repo.list_rules())
    assert repo.put_rule(MAX_RULE_ID, kind="disk", threshold=80.0)[1]
    # SQLite's AUTOINCREMENT would answer "database or disk is full" here
    new = [repo.put_rule(None, kind="disk", threshold=t)[0].id for t in (70.0, 60.0)]
    assert new == [first.id + 1, first.id + 2]
    assert [r.id for r in repo.list_rules()][-4:] == [first.id, *new, MAX_RULE_ID]
