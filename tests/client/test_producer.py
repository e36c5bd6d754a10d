"""app/client/producer.py against one real server (module-scoped): confirms in order, atomic
batches, what cannot be published, and a refused or closed stream."""

from __future__ import annotations

import asyncio

import pytest

from chunkmq.client import AsyncClient, Client, ConnectionFailed, NotFound, Unroutable
from tests.server import ServerProcess


def test_single_publishes_are_confirmed_in_order_with_their_placements(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        with mq.producer("", batch_size=4, max_in_flight=2) as producer:
            futures = [producer.send(f"m{i}", routing_key=name) for i in range(10)]
            producer.flush()
            assert [f.result(timeout=10).routed[0].offset for f in futures] == list(range(10))
            result = producer.publish(json={"n": 1}, routing_key=name, headers={"h": "v"}, tag="t")
            assert result.routed[0].offset == 10
        page = mq.browse(name, offset=10)
        assert (page.messages[0].json(), page.messages[0].headers, page.messages[0].tag) == ({"n": 1}, {"h": "v"}, "t")


def test_batches_are_atomic_and_mandatory_ones_refused_when_unroutable(shared_server: ServerProcess, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_exchange(name, "direct")
            await mq.declare_queue(name)
            await mq.bind(name, name, "k")
            async with mq.producer(name) as producer:
                binary = await producer.publish_batch(["a", b"\x00"], routing_key="k")
                assert [r.routed[0].offset for r in binary.results] == [0, 1]
                with pytest.raises(Unroutable):
                    await producer.publish_batch(["x", "y"], routing_key="nowhere", mandatory=True)
                after = await producer.publish("z", routing_key="k")  # the stream goes on
                assert after.routed[0].offset == 2
            assert (await mq.queue(name)).messages == 3  # nothing of the refused batch

    asyncio.run(scenario())


def test_what_is_not_one_message_is_refused_before_sending(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq, mq.producer("") as producer:
        with pytest.raises(TypeError, match="give messages or json=value, not both"):
            producer.send("x", json=1)
        with pytest.raises(TypeError, match="a producer publishes one str or bytes body"):
            producer.send(["a", "b"])  # type: ignore[arg-type]
        producer.flush()  # nothing was queued by those


def test_a_producer_on_a_missing_exchange_is_refused_with_its_code(shared_server: ServerProcess, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.url) as mq:
            with pytest.raises(NotFound) as refused:
                async with mq.producer(f"{name}-missing", retry_for=2) as producer:
                    await producer.publish("x")
            assert refused.value.code == "exchange_not_found"

    asyncio.run(scenario())


def test_after_close_publishing_fails(shared_server: ServerProcess, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.url) as mq:
            producer = mq.producer("")
            with pytest.raises(ConnectionFailed, match="not started"):
                await producer.send("x", routing_key=name)
            await producer.start()
            await producer.close()
            with pytest.raises(ConnectionFailed, match="the producer was closed"):
                await producer.send("x", routing_key=name)

    asyncio.run(scenario())
