"""The choice of a single active consumer: first attached, sticky while attached, next in order;
then a real broker: one pulling consumer at a time, the next taking over with the unacked messages
first when the active one's lease ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from chunkmq.broker.active import ActiveConsumers
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from tests.broker.conftest import with_broker


def test_the_first_attached_is_active_and_the_next_takes_over_when_it_goes() -> None:
    a = ActiveConsumers()
    assert a.choose(0) is None and a.active is None
    a.attach("s1")
    a.attach("s2")
    a.attach("s3")
    assert a.choose(0) is None and a.active == "s1"
    a.detach("s2")  # a standby leaving changes nothing
    assert a.choose(0) is None and a.active == "s1"
    a.attach("s2")  # back: at the end of the line
    a.detach("s1")
    assert a.choose(0) == "s1" and a.active == "s3"
    assert a.attached(0) == ["s3", "s2"]


def test_a_consumer_with_two_streams_stays_until_both_close() -> None:
    a = ActiveConsumers()
    a.attach("c")
    a.attach("c")
    a.attach("d")
    a.choose(0)
    a.detach("c")
    assert a.choose(0) is None and a.active == "c"
    a.detach("c")
    assert a.choose(0) == "c" and a.active == "d"


def test_a_pulling_consumer_keeps_its_turn_for_its_lease() -> None:
    a = ActiveConsumers()
    a.touch("p", 1000)  # a pull at 0 with a lease of 1,000 ms
    a.attach("s")
    assert a.choose(0) is None and a.active == "p"
    a.attach("p")  # a long poll
    a.detach("p", 2500)
    assert a.choose(2000) is None and a.active == "p"
    assert a.attached(2499) == ["p", "s"]
    assert a.choose(2500) == "p" and a.active == "s"
    assert a.attached(2500) == ["s"]


def offsets(answer: bytes) -> list[int]:
    return [m["offset"] for m in json.loads(answer)["messages"]]


def test_one_consumer_receives_and_the_next_gets_its_unacked_messages_first(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": str(i), "routing_key": "q"} for i in range(10)], queue_name="q")
        group, created = await broker.declare_group("q", "g", {"single_active_consumer": True})
        assert created and group.single_active_consumer
        assert offsets(await broker.pull("q", "g", 3, 0, "a")) == [0, 1, 2]
        assert offsets(await broker.pull("q", "g", 3, 0, "b")) == []  # a standby
        broker.ack("q", "g", {"offsets": [0]})
        await asyncio.sleep(0.25)  # a's lease (the ping timeout, 0.2 s here) ends
        broker.sweep()
        assert group.attached.active is None or group.attached.active == "b"
        assert offsets(await broker.pull("q", "g", 4, 0, "b")) == [1, 2, 3, 4]  # a's unacked first
        assert group.attached.active == "b"
        assert offsets(await broker.pull("q", "g", 4, 0, "a")) == []
        with pytest.raises(InvalidInput, match="single_active_consumer"):
            await broker.declare_group("q", "g", {"single_active_consumer": "yes"})
        await broker.declare_group("q", "g", {"single_active_consumer": False})  # off: both receive
        assert offsets(await broker.pull("q", "g", 2, 0, "a")) == [5, 6]
        await broker.declare_group("q", "g", {"single_active_consumer": True})
        assert group in broker.active_groups
        await broker.delete_queue("q", force=True)
        broker.sweep()
        assert group not in broker.active_groups

    with_broker(tmp_path, work, ws_ping_timeout=0.2)


def test_the_setting_survives_a_restart(tmp_path: Path) -> None:
    async def declare(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.declare_group("q", "g", {"single_active_consumer": True})

    with_broker(tmp_path, declare)

    async def check(broker: Broker) -> None:
        group = broker.queue("q").groups["g"]
        assert group.single_active_consumer and group in broker.active_groups

    with_broker(tmp_path, check)
