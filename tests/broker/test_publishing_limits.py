"""Queue limits are exact: random batches into queues with random max_messages/max_bytes never take
a queue past them (bytes as the API reports them), and reject_publish refuses a batch only when it
really would not fit. A real Broker on a temporary directory (SQLite file, chunk files)."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import QueueFull
from chunkmq.broker.queue import Queue
from chunkmq.broker.views import queue_view, to_json
from chunkmq.config import Settings
from chunkmq.meta import MetaStore, upgrade

_ids = itertools.count()  # unique names and idempotency keys across examples


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with tempfile.TemporaryDirectory(prefix="chunkmq-limits-") as tmp:
        config = Settings(data_dir=Path(tmp) / "data", auth="off", fsync="never", chunk_size=1 << 20,
                          index_chunk_entries=1000)
        config.data_dir.mkdir()
        upgrade(config.meta_url)
        meta = MetaStore(config.meta_url)
        b = Broker.open(config, meta)
        try:
            yield b
        finally:
            b.close()
            meta.close()


text = st.text(alphabet="abcxyzé€ ", max_size=12)
message = st.fixed_dictionaries(
    {"body": st.text(alphabet="abc€", max_size=300)},
    optional={"tag": text.filter(bool), "headers": st.dictionaries(text, text, max_size=3),
              "idempotency_key": st.just("")},  # replaced by a unique key (a repeat would store nothing)
)
batches = st.lists(st.lists(message, min_size=1, max_size=8), min_size=1, max_size=12)
limits = st.fixed_dictionaries({
    "max_messages": st.none() | st.integers(1, 20),
    "max_bytes": st.none() | st.integers(1, 4000),
    "overflow": st.sampled_from(["drop_head", "reject_publish"]),
})


def info(broker: Broker, queue: Queue) -> dict[str, Any]:
    """The queue as GET /api/v1/queues/{name} renders it."""
    return to_json(queue_view(broker, queue))


def _keyed(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "idempotency_key": f"k{next(_ids):012d}"} if "idempotency_key" in m else m for m in batch]


def _within(info: dict[str, Any]) -> bool:
    return ((info["max_messages"] is None or info["messages"] <= info["max_messages"])
            and (info["max_bytes"] is None or info["bytes"] <= info["max_bytes"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queue_limits=st.lists(limits, min_size=1, max_size=3), batches=batches)
def test_random_batches_never_exceed_queue_limits(
    broker: Broker, queue_limits: list[dict[str, Any]], batches: list[list[dict[str, Any]]]
) -> None:
    """A fanout exchange to 1-3 queues with their own limits: a record placed in several queues is
    larger (one placement each), and a batch is refused whole if any reject_publish queue is full."""

    async def run() -> None:
        n = next(_ids)
        exchange = f"fan-{n}"
        await broker.declare_exchange(exchange, {"type": "fanout"})
        queues = []
        for i, body in enumerate(queue_limits):
            queue, _ = await broker.declare_queue(f"lim-{n}-{i}", body)
            await broker.bind({"exchange": exchange, "queue": queue.name})
            queues.append(queue)
        for batch in batches:
            try:
                await broker.publish(exchange, _keyed(batch))
            except QueueFull:
                pass
            for queue in queues:
                shown = info(broker, queue)
                assert _within(shown), shown

    asyncio.run(run())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=limits.filter(lambda d: d["max_bytes"] is not None), batches=batches)
def test_reject_publish_refuses_only_what_would_not_fit(
    broker: Broker, body: dict[str, Any], batches: list[list[dict[str, Any]]]
) -> None:
    """Every refused batch, published into a queue without limits, really takes more than what was
    left: the check counts the bytes the queue's counter will count, no more and no less."""

    async def run() -> None:
        n = next(_ids)
        queue, _ = await broker.declare_queue(f"rej-{n}", {**body, "overflow": "reject_publish"})
        scratch, _ = await broker.declare_queue(f"scratch-{n}", {})
        for batch in batches:
            before = info(broker, queue)
            try:
                await broker.publish("", _keyed(batch), queue_name=queue.name)
            except QueueFull:
                size_before = info(broker, scratch)["bytes"]
                await broker.publish("", _keyed(batch), queue_name=scratch.name)
                size = info(broker, scratch)["bytes"] - size_before
                too_many = body["max_messages"] is not None and before["messages"] + len(batch) > body["max_messages"]
                assert too_many or before["bytes"] + size > body["max_bytes"], (before, size)
                assert info(broker, queue) == before
            else:
                after = info(broker, queue)
                assert _within(after), after
                assert after["messages"] == before["messages"] + len(batch)

    asyncio.run(run())


def test_a_queue_fills_to_the_exact_byte(broker: Broker) -> None:
    """max_bytes equal to the size of three records takes three and refuses the fourth."""

    async def run() -> None:
        probe, _ = await broker.declare_queue(f"probe-{next(_ids)}", {})
        await broker.publish("", [{"body": "x" * 100, "tag": "t"}], queue_name=probe.name)
        one = info(broker, probe)["bytes"]
        queue, _ = await broker.declare_queue(f"exact-{next(_ids)}", {"max_bytes": 3 * one,
                                                                       "overflow": "reject_publish"})
        for _ in range(3):
            await broker.publish("", [{"body": "x" * 100, "tag": "t"}], queue_name=queue.name)
        assert info(broker, queue)["bytes"] == 3 * one
        with pytest.raises(QueueFull):
            await broker.publish("", [{"body": "x", "tag": "t"}], queue_name=queue.name)

    asyncio.run(run())
