"""Bindings and consumer groups: uniqueness, cascades, and the batched floor writes."""

from __future__ import annotations

import threading

import pytest

from chunkmq.meta import AlreadyExists, GroupState, InvalidValue, MetaStore, NotFound
from tests.meta.conftest import floors


@pytest.fixture
def routed(store: MetaStore) -> MetaStore:
    store.create_exchange("orders", "headers")
    store.create_queue("eu")
    store.create_queue("us")
    return store


def test_binding_round_trip(routed: MetaStore) -> None:
    b = routed.create_binding("orders", "eu", "orders.eu", {"x-match": "all", "region": "eu"})
    assert (b.exchange, b.queue, b.routing_key, b.arguments) == (
        "orders", "eu", "orders.eu", {"x-match": "all", "region": "eu"},
    )
    plain = routed.create_binding("orders", "us")
    assert (plain.routing_key, plain.arguments) == ("", {})
    assert routed.load().bindings == (b, plain)


def test_equal_arguments_in_another_key_order_are_a_duplicate(routed: MetaStore) -> None:
    routed.create_binding("orders", "eu", "k", {"a": 1, "b": {"y": 2, "x": 1}})
    with pytest.raises(AlreadyExists) as info:
        routed.create_binding("orders", "eu", "k", {"b": {"x": 1, "y": 2}, "a": 1})
    assert (info.value.entity, info.value.key) == ("binding", ("orders", "eu", "k"))
    # Any difference in exchange, queue, key or arguments makes another binding.
    routed.create_binding("orders", "eu", "k", {"a": 2, "b": {"y": 2, "x": 1}})
    routed.create_binding("orders", "eu", "k2", {"a": 1, "b": {"y": 2, "x": 1}})
    routed.create_binding("orders", "us", "k", {"a": 1, "b": {"y": 2, "x": 1}})
    assert len(routed.load().bindings) == 4


def test_binding_needs_both_ends(routed: MetaStore) -> None:
    with pytest.raises(NotFound) as info:
        routed.create_binding("nope", "eu")
    assert (info.value.entity, info.value.key) == ("exchange", "nope")
    with pytest.raises(NotFound) as info:
        routed.create_binding("orders", "nope")
    assert (info.value.entity, info.value.key) == ("queue", "nope")


def test_default_exchange_cannot_be_bound(routed: MetaStore) -> None:
    with pytest.raises(InvalidValue, match="default exchange"):
        routed.create_binding("", "eu", "eu")


def test_binding_arguments_must_be_a_json_object(routed: MetaStore) -> None:
    with pytest.raises(InvalidValue, match="object"):
        routed.create_binding("orders", "eu", "k", ["a"])  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="not JSON"):
        routed.create_binding("orders", "eu", "k", {"a": object()})


def test_delete_binding_and_ids_are_not_reused(routed: MetaStore) -> None:
    first = routed.create_binding("orders", "eu", "k")
    routed.delete_binding(first.id)
    with pytest.raises(NotFound):
        routed.delete_binding(first.id)
    again = routed.create_binding("orders", "eu", "k")
    assert again.id > first.id
    assert routed.load().bindings == (again,)


def test_deleting_a_queue_cascades_to_its_bindings_and_groups(routed: MetaStore) -> None:
    queues = {q.name: q.id for q in routed.load().queues}
    routed.create_binding("orders", "eu", "a")
    keep = routed.create_binding("orders", "us", "a")
    routed.upsert_group(queues["eu"], "billing")
    other = routed.upsert_group(queues["us"], "billing")
    routed.delete_queue("eu")
    snapshot = routed.load()
    assert snapshot.bindings == (keep,)
    assert snapshot.groups == (other,)


def test_deleting_an_exchange_cascades_to_its_bindings_only(routed: MetaStore) -> None:
    routed.create_exchange("audit", "fanout")
    routed.create_binding("orders", "eu", "a")
    keep = routed.create_binding("audit", "eu")
    routed.delete_exchange("orders")
    snapshot = routed.load()
    assert snapshot.bindings == (keep,)
    assert [q.name for q in snapshot.queues] == ["eu", "us"]


def test_group_upsert(routed: MetaStore) -> None:
    qid = routed.load().queues[0].id
    g = routed.upsert_group(qid, "billing", start="latest", tag_filter=["created", "paid"])
    assert ((g.queue_id, g.name, g.ack_floor, g.start, g.tag_filter)
            == (qid, "billing", 0, "latest", ("created", "paid")))
    routed.save_group_states(floors([(qid, "billing", 42)]))
    # Changing the subscription keeps the committed floor unless one is given.
    changed = routed.upsert_group(qid, "billing", start="earliest", tag_filter=None)
    assert (changed.id, changed.ack_floor, changed.start, changed.tag_filter) == (g.id, 42, "earliest", None)
    assert changed.updated_at >= g.updated_at and changed.created_at == g.created_at
    moved = routed.upsert_group(qid, "billing", ack_floor=7)
    assert moved.ack_floor == 7
    assert routed.load().groups == (moved,)


def test_group_pause_and_single_active_consumer_are_stored(routed: MetaStore) -> None:
    qid = routed.load().queues[0].id
    g = routed.upsert_group(qid, "g")
    assert (g.paused, g.paused_until_ms, g.single_active_consumer) == (False, None, False)
    routed.set_group_pause(qid, "g", True, 1_900_000_000_000)
    routed.upsert_group(qid, "g", single_active_consumer=True)
    (row,) = routed.load().groups
    assert (row.paused, row.paused_until_ms, row.single_active_consumer) == (True, 1_900_000_000_000, True)
    routed.upsert_group(qid, "g", tag_filter=["a"])  # a setting not given is kept
    routed.set_group_pause(qid, "g", False, 1_900_000_000_000)  # resumed: no time kept
    (row,) = routed.load().groups
    assert (row.paused, row.paused_until_ms, row.single_active_consumer) == (False, None, True)
    with pytest.raises(NotFound):
        routed.set_group_pause(qid, "nope", True)


def test_group_names_are_unique_per_queue(routed: MetaStore) -> None:
    eu, us = (q.id for q in routed.load().queues)
    routed.upsert_group(eu, "g")
    routed.upsert_group(us, "g")
    routed.upsert_group(eu, "g")  # an upsert, not a duplicate
    assert sorted((g.queue_id, g.name) for g in routed.load().groups) == [(eu, "g"), (us, "g")]


def test_group_errors(routed: MetaStore) -> None:
    qid = routed.load().queues[0].id
    with pytest.raises(NotFound) as info:
        routed.upsert_group(10_000, "g")
    assert (info.value.entity, info.value.key) == ("queue", 10_000)
    with pytest.raises(InvalidValue, match="start"):
        routed.upsert_group(qid, "g", start="middle")
    with pytest.raises(InvalidValue):
        routed.upsert_group(qid, "")
    with pytest.raises(InvalidValue, match="list of tags"):
        routed.upsert_group(qid, "g", tag_filter="created")
    with pytest.raises(NotFound):
        routed.delete_group(qid, "g")
    routed.upsert_group(qid, "g")
    routed.delete_group(qid, "g")
    assert routed.load().groups == ()


def test_save_group_states_writes_a_whole_batch(routed: MetaStore) -> None:
    eu, us = (q.id for q in routed.load().queues)
    names = [f"g{i}" for i in range(100)]
    for name in names:
        routed.upsert_group(eu, name)
        routed.upsert_group(us, name)
    routed.delete_group(us, "g5")  # deleted meanwhile: its floor is skipped, not an error
    routed.save_group_states(floors([(q, n, 1000 * q + i) for i, n in enumerate(names) for q in (eu, us)]))
    saved = {(g.queue_id, g.name): g.ack_floor for g in routed.load().groups}
    assert saved == {(q, n): 1000 * q + i for i, n in enumerate(names) for q in (eu, us) if (q, n) != (us, "g5")}
    routed.save_group_states([])


def test_save_group_states_is_one_transaction(routed: MetaStore) -> None:
    qid = routed.load().queues[0].id
    routed.upsert_group(qid, "a")
    routed.upsert_group(qid, "b")
    with pytest.raises(InvalidValue):  # the second floor breaks a CHECK: the first is not kept either
        routed.save_group_states(floors([(qid, "a", 5), (qid, "b", -1)]))
    assert [g.ack_floor for g in routed.load().groups] == [0, 0]


def test_floor_writer_thread_beside_admin_calls(routed: MetaStore) -> None:
    """The broker's floor writer runs in its own thread while admin changes arrive: with WAL and a
    busy timeout, neither side fails."""
    qid = routed.load().queues[0].id
    for i in range(20):
        routed.upsert_group(qid, f"g{i}")
    errors: list[BaseException] = []

    def write_floors() -> None:
        try:
            for floor in range(1, 51):
                routed.save_group_states(floors([(qid, f"g{i}", floor) for i in range(20)]))
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=write_floors)
    writer.start()
    for i in range(50):
        routed.create_queue(f"admin-{i}")
    writer.join()
    assert errors == []
    snapshot = routed.load()
    assert {g.ack_floor for g in snapshot.groups} == {50}
    assert len(snapshot.queues) == 52


def test_group_state_above_the_floor_and_loss_counters_round_trip(routed: MetaStore) -> None:
    eu, us = (q.id for q in routed.load().queues)
    routed.upsert_group(eu, "g")
    routed.save_group_states([GroupState(eu, "g", 10, 20, ((12, 15), (17, 18)), 3)], dropped=[(eu, 7)])
    group = routed.load().groups[0]
    assert (group.ack_floor, group.next_offset, group.done, group.missed) == (10, 20, ((12, 15), (17, 18)), 3)
    assert {q.id: q.messages_dropped for q in routed.load().queues} == {eu: 7, us: 0}
    routed.save_group_states([GroupState(eu, "g", 20, 20, (), 3)])  # nothing above the floor any more
    group = routed.load().groups[0]
    assert (group.ack_floor, group.next_offset, group.done) == (20, 20, ())
