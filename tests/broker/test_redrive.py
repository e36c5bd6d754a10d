"""Dead-letter redrive (app/broker/redrive.py) on a real broker: dead-lettered messages go back to
the queue they came from, in order, without their dead-letter headers; it stops at the first one it
cannot move, and moves the dead-letter queue's floor only past what it moved."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput, NotFound
from chunkmq.broker.redrive import DEATH_HEADERS, redrive
from tests.broker.conftest import with_broker


async def _dead_letters(broker: Broker) -> None:
    """Queues a and b dead-letter into "dead" through exchange dlx; four messages die there."""
    await broker.declare_exchange("dlx", {"type": "fanout"})
    await broker.declare_queue("dead", {})
    await broker.bind({"exchange": "dlx", "queue": "dead", "routing_key": ""})
    for name in ("a", "b"):
        await broker.declare_queue(name, {"dead_letter_exchange": "dlx"})
    await broker.publish("", [{"body": "a0", "routing_key": "a", "headers": {"k": "v"}, "tag": "t"},
                              {"body": "a1", "routing_key": "a"}], queue_name="a")
    await broker.publish("", [{"body": "b0", "routing_key": "b"}], queue_name="b")
    for name, count in (("a", 2), ("b", 1)):
        got = orjson.loads(await broker.pull(name, "g", 10, 0, "c"))["messages"]
        broker.nack(name, "g", {"offsets": [m["offset"] for m in got][:count], "requeue": False})


def _bodies(broker: Broker, queue: str) -> list[str]:
    return [m["body"] for m in orjson.loads(broker.browse(queue, 0, None, 100))["messages"]]


def test_redrive_moves_messages_back_in_order_without_death_headers(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _dead_letters(broker)
        assert _bodies(broker, "dead") == ["a0", "a1", "b0"]
        result = await redrive(broker, "dead")
        assert (result.moved, result.by_queue, result.stopped_at) == (3, {"a": 2, "b": 1}, None)
        assert _bodies(broker, "a") == ["a0", "a1", "a0", "a1"] and _bodies(broker, "b") == ["b0", "b0"]
        moved = orjson.loads(broker.browse("a", 2, None, 1))["messages"][0]
        assert moved["headers"] == {"k": "v"} and moved["tag"] == "t"
        assert not DEATH_HEADERS & moved["headers"].keys()
        assert _bodies(broker, "dead") == []  # its floor moved past what was moved
        assert (await redrive(broker, "dead")).moved == 0

    with_broker(tmp_path, work)


def test_redrive_respects_the_limit(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _dead_letters(broker)
        result = await redrive(broker, "dead", limit=2)
        assert result.moved == 2 and _bodies(broker, "dead") == ["b0"]
        with pytest.raises(InvalidInput):
            await redrive(broker, "dead", limit=0)
        with pytest.raises(NotFound):
            await redrive(broker, "nope")

    with_broker(tmp_path, work)


def test_redrive_stops_at_a_message_it_cannot_move(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _dead_letters(broker)
        await broker.publish("", [{"body": "stray", "routing_key": "dead"}], queue_name="dead")
        await broker.delete_queue("b", force=True)
        result = await redrive(broker, "dead")
        assert result.moved == 2 and result.by_queue == {"a": 2}
        assert result.stopped_at == 2 and "'b' does not exist" in (result.reason or "")
        assert _bodies(broker, "dead") == ["b0", "stray"]  # nothing dropped
        await broker.declare_queue("b", {})
        result = await redrive(broker, "dead")
        assert result.moved == 1 and result.reason == "it has no x-death-queue header" and result.stopped_at == 3

    with_broker(tmp_path, work)
