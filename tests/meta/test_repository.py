"""The metadata repository (app/meta/repository.py) on a real SQLite file: tokens, users and the
metrics history (exchanges, queues, bindings and groups have their own files), and its errors:
database errors become MetaErrors whose messages never hold the driver's text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chunkmq.meta import AlreadyExists, InvalidValue, MetaStore, NotFound

PASSWORD = "a-long-enough-password"


@pytest.fixture
def meta(sqlite_url: str) -> Iterator[MetaStore]:
    with MetaStore(sqlite_url) as store:
        yield store


def test_tokens_are_stored_as_hashes_found_by_their_plain_text_and_deleted(meta: MetaStore) -> None:
    assert not meta.has_tokens()
    row, plain = meta.create_token("ci", write="^orders$", read=".*")
    assert meta.has_tokens() and row.prefix == plain[: len(row.prefix)]
    assert (row.name, row.is_admin, row.configure, row.write, row.read) == ("ci", False, "", "^orders$", ".*")
    found = meta.find_token(plain)
    assert found is not None and found.id == row.id and found.last_used_at is None
    assert meta.find_token(plain + "x") is None and meta.find_token("not-a-token") is None
    meta.touch_token(row.id)
    touched = meta.find_token(plain)
    assert touched is not None and touched.last_used_at is not None
    admin, _ = meta.create_token("ops", is_admin=True)
    assert [t.name for t in meta.list_tokens()] == ["ci", "ops"] and admin.is_admin
    meta.delete_token(row.id)
    assert meta.find_token(plain) is None
    with pytest.raises(NotFound) as missing:
        meta.delete_token(row.id)
    assert (missing.value.entity, missing.value.key) == ("token", row.id)
    meta.touch_token(row.id)  # a token deleted meanwhile is ignored


def test_a_token_with_a_bad_pattern_is_refused_before_anything_is_stored(meta: MetaStore) -> None:
    with pytest.raises(InvalidValue, match="read pattern"):
        meta.create_token("bad", read="(")
    assert not meta.has_tokens()


def test_users_passwords_and_their_errors(meta: MetaStore) -> None:
    assert not meta.has_users()
    user = meta.create_user("ann", PASSWORD, is_admin=True)
    assert (user.name, user.is_admin) == ("ann", True) and meta.has_users()
    assert meta.check_password("ann", PASSWORD) == user
    assert meta.check_password("ann", "wrong password!") is None
    assert meta.check_password("nobody", PASSWORD) is None
    with pytest.raises(AlreadyExists) as taken:
        meta.create_user("ann", PASSWORD)
    assert taken.value.message == "user 'ann' already exists"  # the map's words, not SQLite's
    with pytest.raises(InvalidValue):
        meta.create_user("bob", "short")
    meta.set_password("ann", PASSWORD + "2")
    assert meta.check_password("ann", PASSWORD) is None and meta.check_password("ann", PASSWORD + "2") == user
    with pytest.raises(NotFound):
        meta.set_password("nobody", PASSWORD)
    meta.delete_user("ann")
    assert meta.list_users() == []
    with pytest.raises(NotFound):
        meta.delete_user("ann")


def test_a_duplicate_name_is_already_exists_without_the_driver_text(meta: MetaStore) -> None:
    meta.create_exchange("ex", "direct")
    with pytest.raises(AlreadyExists) as taken:
        meta.create_exchange("ex", "direct")
    error = taken.value
    assert (error.entity, error.key) == ("exchange", "ex")
    assert "UNIQUE" not in error.message and "constraint" not in error.message.lower()
    assert "UNIQUE" in str(error.__cause__)  # the cause is chained, for the log


def _queue_point(queue_id: int, t: int, step: int = 1000, messages: float = 1.0) -> dict[str, float | int]:
    return {"queue_id": queue_id, "step_ms": step, "t": t, "messages": messages, "bytes": 10.0,
            "publish_rate": 2.0, "deliver_rate": 3.0}


def _group_point(queue_id: int, group: str, t: int, floor: int, step: int = 1000) -> dict[str, float | int | str]:
    return {"queue_id": queue_id, "group_name": group, "step_ms": step, "t": t, "lag": 5.0, "lag_seconds": 1.0,
            "ack_rate": 4.0, "consumers": 1.0, "ack_floor": floor, "floor_moved_at": t - 100}


def test_history_points_read_back_by_resolution_and_are_pruned_by_age(store: MetaStore) -> None:
    meta = store  # SQLite and PostgreSQL
    a, b = meta.create_queue("a"), meta.create_queue("b")
    meta.upsert_group(a.id, "g")
    meta.save_history([], [])  # nothing to do
    meta.save_history(
        [_queue_point(a.id, 1000), _queue_point(a.id, 2000, messages=4.0), _queue_point(b.id, 2000, messages=6.0),
         _queue_point(a.id, 60_000, step=60_000), _queue_point(999, 2000)],  # queue 999 does not exist: skipped
        [_group_point(a.id, "g", 1000, 7), _group_point(a.id, "g", 2000, 9), _group_point(a.id, "gone", 2000, 1)],
    )
    assert meta.queue_history(a.id, 1000, 0, 10_000) == [(1000, 1.0, 10.0, 2.0, 3.0), (2000, 4.0, 10.0, 2.0, 3.0)]
    assert meta.queue_history(a.id, 1000, 0, 2000) == [(1000, 1.0, 10.0, 2.0, 3.0)]  # until is exclusive
    # from `since` on, after the newest point before it: the values the series holds at `since`
    assert meta.queue_history(a.id, 1000, 1500, 10_000) == [(1000, 1.0, 10.0, 2.0, 3.0), (2000, 4.0, 10.0, 2.0, 3.0)]
    assert meta.queue_history(a.id, 1000, 2500, 10_000) == [(2000, 4.0, 10.0, 2.0, 3.0)]
    assert meta.queue_history(a.id, 60_000, 0, 100_000) == [(60_000, 1.0, 10.0, 2.0, 3.0)]
    assert meta.queue_history_all(1000, 2000, 3000) == [(a.id, 1000, 1.0, 10.0, 2.0, 3.0),  # what a holds at 2000
                                                         (a.id, 2000, 4.0, 10.0, 2.0, 3.0),
                                                         (b.id, 2000, 6.0, 10.0, 2.0, 3.0)]
    assert meta.queue_history_all(1000, 2500, 3000) == [(a.id, 2000, 4.0, 10.0, 2.0, 3.0),
                                                         (b.id, 2000, 6.0, 10.0, 2.0, 3.0)]
    assert [p[0] for p in meta.group_history(a.id, "g", 1000, 0, 10_000)] == [1000, 2000]
    assert meta.last_group_floors() == [(a.id, "g", 9, 1900)]
    # Fine points before 2500 go, but the newest of each series before the cut stays (its series holds
    # its values since): a's and g's at 1000 go, those at 2000 stay, and b's only one.
    assert meta.prune_history(fine_before=2500, coarse_before=0, coarse_step_ms=60_000) == 2
    assert [p[0] for p in meta.queue_history(a.id, 1000, 0, 10_000)] == [2000]
    assert [p[0] for p in meta.queue_history(b.id, 1000, 0, 10_000)] == [2000]
    assert [p[0] for p in meta.group_history(a.id, "g", 1000, 0, 10_000)] == [2000]
    # a series at rest keeps its newest point however old; only newer points let older ones go
    assert meta.prune_history(fine_before=0, coarse_before=100_000, coarse_step_ms=60_000) == 0
    meta.save_history([_queue_point(a.id, 120_000, step=60_000)], [])
    assert meta.prune_history(fine_before=0, coarse_before=200_000, coarse_step_ms=60_000,
                              coarse_after=100_000) == 1
    assert meta.queue_history(a.id, 60_000, 0, 200_000) == [(120_000, 1.0, 10.0, 2.0, 3.0)]


def test_history_samples_are_kept_as_their_resolution_keeps_them(store: MetaStore) -> None:
    meta = store  # SQLite and PostgreSQL
    meta.save_history([], [], [{"step_ms": 1000, "t": t} for t in (1000, 2000, 3000)]
                      + [{"step_ms": 60_000, "t": 1000}, {"step_ms": 1000, "t": 3000}])
    assert meta.history_samples(1000, 0, 10_000) == [1000, 2000, 3000]  # each instant once
    assert meta.history_samples(1000, 1500, 3000) == [2000]
    assert meta.history_samples(60_000, 0, 10_000) == [1000]
    meta.prune_history(fine_before=2500, coarse_before=0, coarse_step_ms=60_000)
    assert meta.history_samples(1000, 0, 10_000) == [3000] and meta.history_samples(60_000, 0, 10_000) == [1000]
    meta.prune_history(fine_before=0, coarse_before=5000, coarse_step_ms=60_000)
    assert meta.history_samples(60_000, 0, 10_000) == []
