"""app/broker/base.py on a real broker: lookups that fail with their API codes, dead-lettering with its
x-death headers, loss counting warned once per pass, and admin operations that run one at a time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import NotFound
from tests.broker.conftest import with_broker


def _messages(broker: Broker, queue: str) -> list[dict[str, Any]]:
    return list(orjson.loads(broker.browse(queue, 0, None, 100))["messages"])


def test_lookups_of_missing_names_fail_with_their_codes(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        with pytest.raises(NotFound) as missing:
            broker.exchange("nope")
        assert (missing.value.code, str(missing.value)) == ("exchange_not_found", "exchange 'nope' not found")
        with pytest.raises(NotFound) as missing:
            broker.queue("nope")
        assert missing.value.code == "queue_not_found"
        await broker.declare_queue("q", {})
        assert broker.queue("q").name == "q" and broker.exchange("").name == ""

    with_broker(tmp_path, work)


def test_a_rejected_message_is_dead_lettered_with_its_history_but_never_back_to_its_queue(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("dlx", {"type": "fanout"})
        await broker.declare_queue("dead", {})
        await broker.declare_queue("src", {"dead_letter_exchange": "dlx"})
        for queue in ("dead", "src"):  # the source is bound too: a dead letter must not loop back
            await broker.bind({"exchange": "dlx", "queue": queue, "routing_key": ""})
        await broker.publish("", [{"body": "m", "routing_key": "src", "headers": {"k": "v"}, "tag": "t"}],
                             queue_name="src")
        [got] = orjson.loads(await broker.pull("src", "g", 10, 0, "c"))["messages"]
        broker.nack("src", "g", {"offsets": [got["offset"]], "requeue": False})
        [dead] = _messages(broker, "dead")
        assert (dead["body"], dead["tag"], dead["routing_key"]) == ("m", "t", "src")
        assert dead["headers"] == {"k": "v", "x-death-reason": "rejected", "x-death-queue": "src",
                                   "x-original-offset": str(got["offset"]), "x-original-exchange": "",
                                   "x-death-group": "g", "x-delivery-count": "1"}
        assert [m["body"] for m in _messages(broker, "src")] == ["m"]  # nothing looped back
        assert (broker.queue("src").dead_lettered, broker.exchange("dlx").messages_in) == (1, 1)
        assert broker.stats.dead_lettered == 1

    with_broker(tmp_path, work)


def test_messages_dropped_by_a_limit_are_dead_lettered_without_a_group(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("dlx", {"type": "direct"})
        await broker.declare_queue("dead", {})
        await broker.bind({"exchange": "dlx", "queue": "dead", "routing_key": "overflowed"})
        await broker.declare_queue("src", {"max_messages": 1, "dead_letter_exchange": "dlx",
                                           "dead_letter_routing_key": "overflowed"})
        await broker.publish("", [{"body": "old", "routing_key": "src"}], queue_name="src")
        await broker.publish("", [{"body": "new", "routing_key": "src"}], queue_name="src")
        [dead] = _messages(broker, "dead")
        assert dead["body"] == "old" and dead["routing_key"] == "overflowed"
        assert dead["headers"]["x-death-reason"] == "maxlen"
        assert "x-death-group" not in dead["headers"] and "x-delivery-count" not in dead["headers"]

    with_broker(tmp_path, work)


def test_a_dead_letter_exchange_that_does_not_exist_routes_nothing_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("src", {"max_messages": 1, "dead_letter_exchange": "gone"})
        await broker.publish("", [{"body": "a", "routing_key": "src"}, {"body": "b", "routing_key": "src"}],
                             queue_name="src")
        assert [m["body"] for m in _messages(broker, "src")] == ["b"]
        assert broker.stats.dead_lettered == 0

    with caplog.at_level(logging.WARNING, logger="chunkmq.broker"):
        with_broker(tmp_path, work)
    assert "queue src: dead-letter exchange 'gone' does not exist" in caplog.text


def test_losses_are_counted_at_once_and_warned_about_once_per_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def work(broker: Broker) -> list[str]:
        await broker.declare_queue("q", {})
        queue = broker.queue("q")
        broker.count_dropped(queue, 2, "max_age")
        broker.count_dropped(queue, 3, "max_age")
        broker.count_dropped(queue, 1, "disk budget")
        assert (queue.messages_dropped, broker.stats.dropped) == (6, 6)
        caplog.clear()
        broker.warn_losses()
        first = [r.getMessage() for r in caplog.records if r.name == "chunkmq.broker"]
        broker.warn_losses()  # nothing new since
        return first + [r.getMessage() for r in caplog.records if r.name == "chunkmq.broker"][len(first):]

    with caplog.at_level(logging.WARNING, logger="chunkmq.broker"):
        warned = with_broker(tmp_path, work)
    assert warned == ["queue 'q': 1 messages deleted by disk budget", "queue 'q': 5 messages deleted by max_age"]


def test_two_identical_declares_at_once_both_succeed_one_creating(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        results = await asyncio.gather(*(broker.declare_queue("q", {"max_messages": 5}) for _ in range(3)))
        assert sorted(created for _, created in results) == [False, False, True]
        assert len({id(q) for q, _ in results}) == 1

    with_broker(tmp_path, work)
