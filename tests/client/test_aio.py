"""The asyncio client against a real server: REST calls, the stream consumer and the producer,
including reconnects across a server restart."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from chunkmq import (
    AsyncClient,
    Client,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    OutgoingMessage,
    QueueFull,
    Unroutable,
)
from tests.client.relay import Relay, self_signed
from tests.server import ServerProcess


def run(coro: Coroutine[Any, Any, None], timeout: float = 60) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def test_rest_calls(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_exchange(f"{name}-x", "fanout")
            assert (await mq.exchange(f"{name}-x")).type == "fanout"
            assert f"{name}-x" in {e.name for e in await mq.exchanges()}
            await mq.declare_queue(name)
            await mq.update_queue(name, max_deliveries=3)
            assert name in {q.name for q in await mq.queues()}
            binding = await mq.bind(f"{name}-x", name)
            assert [b.id for b in await mq.bindings(exchange=f"{name}-x")] == [binding.id]
            published = await mq.publish(f"{name}-x", ["a", b"b", OutgoingMessage("c", tag="t")])
            await mq.publish_to_queue(name, ["d"])
            assert [m.body for m in (await mq.browse(name)).messages] == ["a", b"b", "c", "d"]
            assert (await mq.message(published.results[2].id)).tag == "t"
            await mq.declare_group(name, "g")
            pulled = await mq.pull(name, "g", 2, consumer="c9")
            assert (await mq.ack(name, "g", [pulled[0].offset])).ack_floor == 1
            assert (await mq.nack(name, "g", [pulled[1].offset])).nacked == 1
            assert (await mq.ack(name, "g", up_to=2)).ack_floor == 2
            with pytest.raises(InvalidRequest) as refused:  # 2 and 3 were never delivered: seek skips
                await mq.ack(name, "g", up_to=4)
            assert refused.value.code == "invalid_ack"
            assert (await mq.seek(name, "g", to="earliest")).ack_floor == 0
            assert (await mq.group(name, "g")).consumers == ["c9"]
            assert (await mq.pause(name, "g", until_ms=2**62)).paused_until_ms == 2**62
            assert await mq.pull(name, "g", 2, consumer="c9") == []
            assert not (await mq.resume(name, "g")).paused
            single = await mq.declare_group(name, "g", single_active_consumer=True)
            assert single.single_active_consumer and single.active_consumer is None
            assert [g.name for g in await mq.groups(name)] == ["g"]
            await mq.delete_group(name, "g")
            assert (await mq.queue(name)).messages == 4
            assert "uptime_seconds" in await mq.overview() or await mq.overview()
            assert await mq.purge(name) == 4
            await mq.unbind(binding.id)
            await mq.delete_queue(name)
            await mq.delete_exchange(f"{name}-x")
            with pytest.raises(NotFound):
                await mq.exchange(f"{name}-x")

    run(main())


def test_binary_batches(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name)
            published = await mq.publish_to_queue(name, ["a", b"\x00b"], binary=True)
            assert [r.routed[0].offset for r in published.results] == [0, 1]
            await mq.publish("", ["c"], routing_key=name, binary=True)
            pulled = await mq.pull(name, "g", 2, binary=True)
            assert [m.body for m in pulled] == ["a", b"\x00b"]
            rest = await mq.pull(name, "g", 2, ack_up_to=2, binary=True)
            assert [(m.body, m.routing_key) for m in rest] == [("c", name)]
            assert (await mq.group(name, "g")).ack_floor == 2
            await mq.seek(name, "g", to="earliest")
            batch = await mq.pull_batch(name, "g", 10)
            assert batch.bodies == ["a", b"\x00b", "c"] and batch.routing_keys == ["", "", name]
            assert batch.next_offset == 3 and (await mq.pull_batch(name, "g", 10, ack_up_to=3)).offsets == []

    run(main())


def test_consumer_iterates_with_credit_refill_and_auto_acks(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name)
            for start in range(0, 1000, 250):
                await mq.publish("", [str(i) for i in range(start, start + 250)], routing_key=name)
            seen = []
            async with mq.consume(name, "g", credit=64) as stream:
                async for message in stream:
                    seen.append(int(message.body))
                    if len(seen) == 1000:
                        break
            assert seen == list(range(1000))
            info = await mq.group(name, "g")
            assert (info.ack_floor, info.in_flight, info.lag) == (1000, 0, 0)

    run(main())


def test_consumer_hands_over_batches_acked_as_a_whole(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name, ack_timeout_ms=60_000)
            await mq.publish_to_queue(name, [str(i) for i in range(1200)])
            seen: list[int] = []
            async with mq.consume(name, "g", credit=500) as stream:
                async for batch in stream.batches(max_messages=200):
                    assert 0 < len(batch) <= 200
                    seen += [int(m.body) for m in batch]
                    if len(seen) == 1200:
                        break
                assert await stream.next_batch(timeout=0.1) == []
            assert seen == list(range(1200))
            assert (await mq.group(name, "g")).ack_floor == 1200
            await mq.publish_to_queue(name, ["a", "b"])
            with pytest.raises(RuntimeError):
                async with mq.consume(name, "g", credit=10) as stream:
                    async for batch in stream.batches():
                        raise RuntimeError(f"cannot handle {len(batch)}")
            async with mq.consume(name, "g", credit=10, auto_ack=False) as manual:
                again = await manual.next_batch(timeout=5)
                while len(again) < 2:  # handed back together, though a frame may cut them
                    again += await manual.next_batch(timeout=5)
                assert [(m.body, m.delivery_count) for m in again] == [("a", 2), ("b", 2)]
                await manual.ack(again)
            assert (await mq.group(name, "g")).ack_floor == 1202

    run(main())


def test_a_failing_loop_body_hands_its_message_back(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name, ack_timeout_ms=60_000)
            await mq.publish("", ["0", "1", "2", "3"], routing_key=name)
            with pytest.raises(RuntimeError):
                async with mq.consume(name, "g", credit=10) as stream:
                    async for message in stream:
                        if message.body == "2":
                            raise RuntimeError("cannot handle 2")
            # 0 and 1 were done; 2 failed and 3 was never looked at: both back at once, not after 60 s.
            async with mq.consume(name, "g", credit=10) as stream:
                again = [(m.body, m.delivery_count) async for m in _take(stream, 2)]
            assert again == [("2", 2), ("3", 2)]
            async with mq.consume(name, "g", credit=10, auto_ack=False) as manual:
                await mq.publish("", ["4", "5"], routing_key=name)
                got = [m async for m in _take(manual, 2)]
                await manual.ack([got[0]])
                await manual.nack([got[1]])
                redelivered = [m async for m in _take(manual, 1)]
                assert (redelivered[0].body, redelivered[0].delivery_count) == ("5", 2)
                await manual.ack_up_to(6)
            info = await mq.group(name, "g")
            assert (info.ack_floor, info.in_flight) == (6, 0)

    run(main())


async def _take(stream: Any, n: int) -> Any:
    async for message in stream:
        yield message
        n -= 1
        if n == 0:
            return


def test_producer_batches_single_publishes_and_confirms_in_order(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name)
            async with mq.producer("", batch_size=50, max_in_flight=4) as producer:
                results = await asyncio.gather(*(producer.publish(str(i), routing_key=name) for i in range(1000)))
                assert [r.routed[0].offset for r in results] == list(range(1000))
                frames_used = producer._seq
                assert frames_used < 100, frames_used  # batched, not a frame per message
                batch = await producer.publish_batch(["x", b"y"], routing_key=name)
                assert [r.routed[0].offset for r in batch.results] == [1000, 1001]
                with pytest.raises(Unroutable):
                    await producer.publish_batch(["z"], routing_key="nowhere", mandatory=True)
                one = await producer.publish("after the error", routing_key=name, headers={"h": "1"})
                assert one.routed[0].offset == 1002
            page = await mq.browse(name, offset=1000)
            assert [m.body for m in page.messages] == ["x", b"y", "after the error"]

    run(main())


def test_streams_survive_a_server_restart(server: ServerProcess, name: str) -> None:
    """The producer resends unconfirmed frames after reconnecting (idempotent: no duplicates); the
    consumer resumes and every message arrives (at least once)."""
    total = 4000

    async def main() -> None:
        async with AsyncClient(server.url) as mq:
            await mq.declare_queue(name)
            async with mq.producer("", batch_size=100, max_in_flight=10, idempotent=True) as producer:
                futures = []
                for i in range(total):
                    futures.append(await producer.send(str(i), routing_key=name))
                    if i == total // 2:
                        await asyncio.to_thread(server.restart)
                results = await asyncio.gather(*futures)
                assert producer.reconnects >= 1
            offsets = sorted(r.routed[0].offset for r in results)
            assert offsets == sorted(set(offsets))
            assert len([m for page in [await mq.browse(name, limit=10_000)] for m in page.messages]) == total

            seen: set[str] = set()
            async with mq.consume(name, "g", credit=200) as stream:
                async for message in stream:
                    seen.add(message.body)  # type: ignore[arg-type]
                    if len(seen) == total // 2 and not stream.reconnects:
                        await asyncio.to_thread(server.restart)
                    if len(seen) == total:
                        break
                assert stream.reconnects >= 1
            assert seen == {str(i) for i in range(total)}

    run(main(), timeout=120)


def test_tls_proxies_and_retries_as_the_blocking_clients(shared_server: ServerProcess, name: str,
                                                          tmp_path: Path) -> None:
    certificate = self_signed(tmp_path)

    async def main() -> None:
        with Relay(shared_server.port, tls=certificate) as tls, Relay(tls.port, proxy=True) as proxy:
            async with AsyncClient(f"https://127.0.0.1:{tls.port}", verify=str(certificate[0]),
                                   proxy=f"http://127.0.0.1:{proxy.port}") as mq:
                await mq.declare_queue(name, max_messages=1, overflow="reject_publish")
                await mq.publish_to_queue(name, "fills it")
                assert proxy.seen == [f"CONNECT 127.0.0.1:{tls.port} HTTP/1.1".encode()]
                purger = asyncio.get_running_loop().call_later(0.15, lambda: Client(shared_server.url).purge(name))
                mq.retries = 6
                await mq.publish_to_queue(name, "fits once purged")  # QueueFull, retried with backoff
                purger.cancel()
                mq.retries = 0
                with pytest.raises(QueueFull):
                    await mq.publish_to_queue(name, "no room")
            async with AsyncClient(f"https://127.0.0.1:{tls.port}", retries=0) as untrusted:
                with pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED"):
                    await untrusted.queues()

    run(main())


def test_queues_by_the_page(shared_server: ServerProcess, name: str) -> None:
    mine = [f"{name}-{i}" for i in range(3)]

    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            for queue in mine:
                await mq.declare_queue(queue)
            assert [q.name for q in await mq.queues(limit=1, after=mine[0])] == mine[1:2]
            every = [q.name async for q in mq.iter_queues(page_size=1)]
            assert every == [q.name for q in await mq.queues()] and [n for n in every if n.startswith(name)] == mine

    run(main())


def test_ttl_ms_on_every_publish_call(shared_server: ServerProcess, name: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name)
            await mq.publish_to_queue(name, ["a", "b"], ttl_ms=50)
            await mq.publish("", "c", routing_key=name, ttl_ms=50)
            async with mq.producer("") as producer:
                await producer.publish("d", routing_key=name, ttl_ms=50)
                await producer.publish("kept", routing_key=name)
            await asyncio.sleep(0.1)
            assert [m.body for m in await mq.pull(name, "g", max_messages=10)] == ["kept"]
            assert (await mq.queue(name)).raw["expired"] == 4

    run(main())
