"""Consuming (app/broker/consuming.py) on a real broker (SQLite, chunk files): groups, pull, ack,
nack, seek, dead-lettering past max_deliveries, the floors written behind and the retention floors."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from chunkmq.wire import codes
from tests.broker.conftest import with_broker


async def _queue(broker: Broker, name: str, count: int, settings: dict[str, Any] | None = None) -> None:
    await broker.declare_queue(name, settings or {})
    if count:
        await broker.publish("", [{"body": f"m{i}", "routing_key": name} for i in range(count)], queue_name=name)


async def _pull(broker: Broker, queue: str, group: str, n: int = 10, wait_ms: int = 0) -> list[dict[str, Any]]:
    return orjson.loads(await broker.pull(queue, group, n, wait_ms, "c1"))["messages"]


def test_pull_ack_and_the_floor(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 5)
        got = await _pull(broker, "q", "g", 3)  # the group is created at earliest on first pull
        assert [m["body"] for m in got] == ["m0", "m1", "m2"] and [m["offset"] for m in got] == [0, 1, 2]
        assert broker.ack("q", "g", {"offsets": [1]}) == {"ack_floor": 0, "acked": 1, "not_in_flight": []}
        assert broker.ack("q", "g", {"offsets": [0, 9]}) == {"ack_floor": 2, "acked": 1, "not_in_flight": [9]}
        assert broker.ack("q", "g", {"up_to": 3})["ack_floor"] == 3
        with pytest.raises(InvalidInput) as beyond:
            broker.ack("q", "g", {"up_to": 4})  # offset 3 was never delivered
        assert beyond.value.code == codes.INVALID_ACK
        for bad in ({"offsets": []}, {"offsets": [-1]}, {"offsets": [1], "up_to": 1}, {"x": 1}):
            with pytest.raises(InvalidInput):
                broker.ack("q", "g", bad)
        assert [m["offset"] for m in await _pull(broker, "q", "g")] == [3, 4]
        assert broker.retention_floors()[broker.queue("q").id] == 3

    with_broker(tmp_path, work)


def test_declare_group_at_latest_with_a_tag_filter_and_unknown_names(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 2)
        group, created = await broker.declare_group("q", "late", {"start": "latest"})
        assert created and group.next_offset == 2
        assert (await broker.declare_group("q", "late", {}))[1] is False
        await broker.publish("", [{"body": "a", "tag": "red", "routing_key": "q"},
                                  {"body": "b", "tag": "blue", "routing_key": "q"}], queue_name="q")
        await broker.declare_group("q", "reds", {"tag_filter": ["red"]})
        assert [m["body"] for m in await _pull(broker, "q", "reds")] == ["a"]
        assert [m["body"] for m in await _pull(broker, "q", "late")] == ["a", "b"]
        for body in ({"start": "middle"}, {"tag_filter": []}, {"tag_filter": "red"}, {"other": 1}):
            with pytest.raises(InvalidInput):
                await broker.declare_group("q", "g2", body)
        with pytest.raises(NotFound) as missing:
            broker.ack("q", "nobody", {"offsets": [0]})
        assert missing.value.code == codes.GROUP_NOT_FOUND
        await broker.delete_group("q", "late")
        with pytest.raises(NotFound):
            await broker.delete_group("q", "late")

    with_broker(tmp_path, work)


def test_a_waiting_pull_wakes_on_publish_and_times_out_empty(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 0)
        assert await _pull(broker, "q", "g", wait_ms=50) == []
        waiting = asyncio.create_task(_pull(broker, "q", "g", wait_ms=10_000))
        await asyncio.sleep(0.05)
        await broker.publish("", [{"body": "now", "routing_key": "q"}], queue_name="q")
        got = await asyncio.wait_for(waiting, 5)
        assert [m["body"] for m in got] == ["now"]

    with_broker(tmp_path, work)


def test_nack_redelivers_then_dead_letters_past_max_deliveries(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("dlx", {"type": "fanout"})
        await _queue(broker, "dead", 0)
        await broker.bind({"exchange": "dlx", "queue": "dead", "routing_key": ""})
        await _queue(broker, "q", 2, {"max_deliveries": 2, "dead_letter_exchange": "dlx"})
        assert len(await _pull(broker, "q", "g")) == 2
        assert broker.nack("q", "g", {"offsets": [0]})["exhausted"] == 0
        again = await _pull(broker, "q", "g")
        assert [(m["offset"], m["delivery_count"]) for m in again] == [(0, 2)]
        assert broker.nack("q", "g", {"offsets": [0]})["exhausted"] == 1  # its second delivery was the last
        assert broker.nack("q", "g", {"offsets": [1], "requeue": False})["exhausted"] == 1  # rejected
        dead = await _pull(broker, "dead", "g")
        assert [m["body"] for m in dead] == ["m0", "m1"]
        assert [m["headers"]["x-death-reason"] for m in dead] == ["delivery_limit", "rejected"]
        for bad in ({"offsets": [0], "delay_ms": -1}, {"offsets": [0], "requeue": "no"}):
            with pytest.raises(InvalidInput):
                broker.nack("q", "g", bad)

    with_broker(tmp_path, work)


def test_seek_moves_the_group_within_the_queue(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 4)
        await _pull(broker, "q", "g", 4)
        assert broker.seek("q", "g", {"offset": 1}).next_offset == 1
        assert [m["offset"] for m in await _pull(broker, "q", "g")] == [1, 2, 3]
        assert broker.seek("q", "g", {"offset": 99}).next_offset == 4  # clamped to the end
        assert broker.seek("q", "g", {"to": "earliest"}).next_offset == 0
        assert broker.seek("q", "g", {"to": "latest"}).next_offset == 4
        for bad in ({}, {"to": "middle"}, {"to": "latest", "offset": 1}):
            with pytest.raises(InvalidInput):
                broker.seek("q", "g", bad)

    with_broker(tmp_path, work)


def test_a_queue_hidden_from_consumers_refuses_pulls(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 1)
        await broker.update_queue("q", {"consumer_visible": False})
        with pytest.raises(PreconditionFailed):
            await _pull(broker, "q", "g")

    with_broker(tmp_path, work)


def test_group_state_is_written_behind_and_survives_a_restart(tmp_path: Path) -> None:
    async def first(broker: Broker) -> None:
        await _queue(broker, "q", 3)
        await _pull(broker, "q", "g", 3)
        broker.ack("q", "g", {"offsets": [0, 1]})
        assert await broker.commit_groups() == 1
        assert await broker.commit_groups() == 0  # nothing changed since

    async def second(broker: Broker) -> None:
        group = broker.queue("q").groups["g"]
        assert group.ack_floor == 2
        assert [m["offset"] for m in await _pull(broker, "q", "g")] == [2]  # in flight, not acked: again

    with_broker(tmp_path, first)
    with_broker(tmp_path, second)


def test_the_rounds_visit_only_the_groups_and_queues_that_changed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def work(broker: Broker) -> None:
        for i in range(30):
            await _queue(broker, f"q{i}", 2, {"ack_timeout_ms": 1})
            await broker.declare_group(f"q{i}", "g", {})
        await broker.commit_groups()
        await broker.run_retention()  # the first round looks at every queue
        changes = broker.group_changes
        assert not changes.groups and not changes.timed
        # a pull and an ack on one queue: only its group is committed, swept, and retention looks at it
        got = await _pull(broker, "q7", "g", 1)
        group = broker.queue("q7").groups["g"]
        assert changes.groups == {group} and changes.timed == {group}
        assert changes.take_queues("retention") == {group.queue_id}
        changes.touch_queue(group.queue_id)  # given back to the round below
        assert await broker.commit_groups() == 1 and not changes.groups
        assert await broker.commit_groups() == 0
        await asyncio.sleep(0.01)
        broker.sweep()  # the ack deadline passed: the message waits for redelivery
        assert group.pending == {got[0]["offset"]: 1} and changes.timed == {group}
        assert [m["offset"] for m in await _pull(broker, "q7", "g", 2)] == [0, 1]
        broker.ack("q7", "g", {"up_to": 2})
        broker.sweep()  # nothing ahead for the group any more: it leaves the sweep
        assert not changes.timed
        enforced: list[str] = []
        limits = broker.enforce_limits
        monkeypatch.setattr(broker, "enforce_limits", lambda queue: enforced.append(queue.name) or limits(queue))
        await broker.run_retention()
        assert enforced == ["q7"] and broker.store.queue_indexes[group.queue_id].wanted == 2
        enforced.clear()
        await broker.run_retention()
        assert enforced == []
        # the floors the round gave the store are what every queue's full round gives
        full = broker.retention_floors()
        assert {q: qi.wanted for q, qi in broker.store.queue_indexes.items()} == full

    with_broker(tmp_path, work)


def test_retention_comes_back_to_a_queue_when_its_oldest_message_reaches_its_age(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def work(broker: Broker) -> None:
        await _queue(broker, "old", 0, {"max_age_seconds": 1})
        await _queue(broker, "other", 2)
        await broker.run_retention()
        await broker.publish("", [{"body": "x", "routing_key": "old"}] * 3)
        await broker.run_retention()  # appended: looked at, and its oldest message's age limit scheduled
        enforced: list[str] = []
        limits = broker.enforce_limits
        monkeypatch.setattr(broker, "enforce_limits", lambda queue: enforced.append(queue.name) or limits(queue))
        await broker.run_retention()
        assert enforced == [] and broker.store.first_offset(broker.queue("old").id) == 0
        await asyncio.sleep(1.1)
        await broker.run_retention()
        assert enforced == ["old"] and broker.store.first_offset(broker.queue("old").id) == 3
        assert broker.queue("old").id not in broker.aging_at  # empty now: nothing to age out
        assert list(broker.aging_at) == [broker.queue("other").id]  # the default age limit: 7 days

    with_broker(tmp_path, work)


def test_a_long_poll_leaves_no_garbage_for_the_collector(tmp_path: Path) -> None:
    """A pull that waits, ended by a publish or by its timeout, leaves no reference cycle behind:
    thousands of long polls a second would otherwise make the collector stop the server for tens of
    milliseconds every few seconds (the tail of every latency)."""
    async def work(broker: Broker) -> None:
        await _queue(broker, "q", 0)
        assert await _pull(broker, "q", "g") == []  # the group, made
        gc.collect()
        gc.disable()
        try:
            for i in range(20):
                waiting = asyncio.create_task(_pull(broker, "q", "g", wait_ms=10_000))
                await asyncio.sleep(0)  # it waits
                await broker.publish("", [{"body": f"m{i}", "routing_key": "q"}], queue_name="q")
                assert [m["body"] for m in await waiting] == [f"m{i}"]
            assert await _pull(broker, "q", "g", wait_ms=1) == []  # ended by its timeout
            assert gc.collect() == 0
        finally:
            gc.enable()

    with_broker(tmp_path, work)
