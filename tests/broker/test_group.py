"""Group state as written to the database and taken back after a restart."""

from __future__ import annotations

from pathlib import Path

from chunkmq.broker.group import COLUMNS_FROM, Group
from chunkmq.storage import NewMessage, Store, StoreOptions


def _store(tmp_path: Path, n: int) -> Store:
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=1 << 16, index_chunk_entries=64))
    store.create_queue(1)
    store.append([NewMessage(str(i).encode(), (1,)) for i in range(n)])
    return store


def test_state_names_the_floor_and_the_done_ranges_above_it(tmp_path: Path) -> None:
    store = _store(tmp_path, 30)
    group = Group(1, "g", next_offset=0)
    assert group.state() == (0, 0, ())
    assert len(group.deliver(store, "c", 20, 30_000, 0)) == 20
    assert group.state() == (0, 20, ())  # all delivered, none done
    group.ack([0, 1, 2, 5, 6, 19])
    assert group.state() == (3, 20, ((5, 7), (19, 20)))
    group.ack_up_to(20, 30)
    assert group.state() == (20, 20, ())
    store.close()


def test_restore_redelivers_exactly_what_is_not_done(tmp_path: Path) -> None:
    store = _store(tmp_path, 30)
    before = Group(1, "g", next_offset=0)
    before.deliver(store, "c", 20, 30_000, 0)
    before.ack([0, 1, 2, 5, 6, 19])
    floor, next_offset, done = before.state()

    after = Group(1, "g", next_offset=floor)
    after.restore(next_offset, done, now=0)
    assert after.ack_floor == 3 and after.changes == 0
    offsets = [m[0] for m, _ in after.deliver(store, "c", 100, 30_000, 0)]
    assert offsets == [3, 4, *range(7, 19), *range(20, 30)]
    store.close()


def test_changes_count_only_real_changes(tmp_path: Path) -> None:
    store = _store(tmp_path, 5)
    group = Group(1, "g", next_offset=0)
    group.deliver(store, "c", 10, 30_000, 0)
    mark = group.changes
    assert group.deliver(store, "c", 10, 30_000, 0) == []  # an empty pull changes nothing
    assert group.changes == mark
    group.ack([1])
    assert group.changes == mark + 1
    store.close()


def test_idle_consumers_are_forgotten(tmp_path: Path) -> None:
    from chunkmq.broker.group import CONSUMER_FORGET_MS

    group = Group(1, "g", next_offset=0)
    group.consumers = {"old": 1_000, "recent": 1_000 + CONSUMER_FORGET_MS}
    group.forget_idle_consumers(2_000 + CONSUMER_FORGET_MS)
    assert list(group.consumers) == ["recent"]


def test_deadlines_expire_in_order_whatever_order_they_were_set(tmp_path: Path) -> None:
    """The first deliveries of a pull share one entry of the deadline heap, whatever order their
    deadlines come in (a shorter ack timeout, redeliveries in between): expiry still finds each
    message when it is due."""
    store = _store(tmp_path, 40)
    group = Group(1, "g", next_offset=0)
    group.deliver(store, "c", 10, 1_000, 0)  # 0-9 due at 1,000
    group.deliver(store, "c", 10, 5_000, 0)  # 10-19 due at 5,000
    group.deliver(store, "c", 10, 200, 100)  # 20-29 due at 300: earlier than the bound, pushed
    group.deliver(store, "c", 10, 400, 500)  # 30-39 due at 900
    heap = group._deadlines
    assert len(heap) == 4 and all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap)))
    expired = {}
    for now in (300, 900, 1_000, 5_000):
        group.expire(now, None)
        expired[now] = sorted(group.pending)
    assert expired[300] == list(range(20, 30))
    assert expired[900] == list(range(20, 40))
    assert expired[1_000] == [*range(10), *range(20, 40)]
    assert expired[5_000] == list(range(40))
    store.close()


def test_deliver_fresh_takes_pulls_of_first_deliveries_from_columns_from_messages(tmp_path: Path) -> None:
    """The column path serves a pull of at least COLUMNS_FROM first deliveries, tracked as deliver
    tracks them; a tag filter, a redelivery due or a smaller pull leave it to deliver."""
    store = _store(tmp_path, 3 * COLUMNS_FROM)
    group = Group(1, "g", next_offset=0)
    page = group.deliver_fresh(store, "c", COLUMNS_FROM, 1_000, 0)
    assert page is not None and page.offsets.tolist() == list(range(COLUMNS_FROM))
    assert group.next_offset == COLUMNS_FROM and sorted(group.in_flight) == list(range(COLUMNS_FROM))
    assert group.in_flight[7].deadline == 1_000 and "c" in group.consumers
    assert group.deliver_fresh(store, "c", COLUMNS_FROM - 1, 1_000, 0) is None  # small pull
    group.nack([7], 0, 10, None)
    assert group.deliver_fresh(store, "c", COLUMNS_FROM, 1_000, 10) is None  # 7 is due again
    assert [(m[0], count) for m, count in group.deliver(store, "c", 1, 1_000, 10)] == [(7, 2)]
    assert group.expire(1_000, None) == [] and sorted(group.pending) == [i for i in range(COLUMNS_FROM) if i != 7]
    group.ack_up_to(group.next_offset, 3 * COLUMNS_FROM)
    assert not group.in_flight and not group.pending
    group.set_tag_filter(("t",))
    assert group.deliver_fresh(store, "c", COLUMNS_FROM, 1_000, 2_000) is None
    assert group.deliver_fresh(store, "c", 2 * COLUMNS_FROM, 1_000, 2_000) is None  # the filter, still
    group.set_tag_filter(None)
    assert group.deliver_fresh(store, "c", 10 * COLUMNS_FROM, 1_000, 2_000) is not None  # the rest: 400
    assert group.deliver_fresh(store, "c", 10 * COLUMNS_FROM, 1_000, 2_000) is None  # nothing left
    store.close()


def test_catch_up_counts_what_retention_removed_under_the_group_after_a_seek_too(tmp_path: Path) -> None:
    """catch_up (every delivery) skips what the queue no longer holds: in flight, or below a seek;
    it finds out without a pass over what is in flight while the queue's first offset is below the
    group's floor."""
    store = _store(tmp_path, 30)
    group = Group(1, "g", next_offset=0)
    assert len(group.deliver(store, "c", 20, 30_000, 0)) == 20  # 0..19 in flight
    store.set_first_offset(1, 5)
    assert [m[0] for m, _ in group.deliver(store, "c", 1, 30_000, 0)] == [20]
    assert (group.missed, group.ack_floor, sorted(group.in_flight)[:2]) == (5, 5, [5, 6])
    group.ack_up_to(21, 30)
    store.set_first_offset(1, 15)
    assert [m[0] for m, _ in group.deliver(store, "c", 1, 30_000, 0)] == [21]  # the floor, 21, is above 15
    assert group.missed == 5
    group.seek(0)  # below the first offset again
    store.set_first_offset(1, 18)
    assert [m[0] for m, _ in group.deliver(store, "c", 2, 30_000, 0)] == [18, 19]
    assert group.missed == 5 + 18
    store.close()
