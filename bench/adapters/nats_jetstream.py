"""NATS JetStream (nats-py): async publish acked per batch, a durable push consumer with AckAll.

nats-py documents two ways to consume with acks: pull subscriptions (`fetch`, one request per batch)
and push subscriptions (the server streams to a deliver subject). Push is the faster one (several times
faster on this machine: no request round trip per batch), so the durable consumer is a push consumer.
Its `max_ack_pending` is the window (`pull`, like RabbitMQ's prefetch) and an AckAll every 100
messages keeps it open, as the RabbitMQ adapter does with multiple-acks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from importlib.metadata import version
from typing import Any, TypeVar

import nats
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody

T = TypeVar("T")
DURABLE = "bench"
ACK_EVERY = 100


def subject(queue: str) -> str:
    return f"bench.{queue}"


def deliver_subject(queue: str) -> str:
    # Fixed (not an inbox): the consumer is declared by one client process and read by another.
    return f"deliver.bench.{queue}"


class NatsJetStreamAdapter(Adapter):
    name = "nats"
    server = "nats"
    setup = (f"nats-py {version('nats-py')}; publish_async of the batch, then all PubAcks awaited; a durable "
             "push consumer (AckAll, max_ack_pending = the pull window), one ack every 100 messages")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self._run(nats.connect(f"nats://127.0.0.1:{self.endpoint.port}", max_reconnect_attempts=0))
        self.js = self.nc.jetstream(timeout=30)

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.close()

    def declare(self, queue: str) -> None:
        async def go() -> None:
            await self.js.add_stream(name=queue, subjects=[subject(queue)], storage=StorageType.FILE)
            await self.js.add_consumer(queue, ConsumerConfig(
                durable_name=DURABLE, deliver_subject=deliver_subject(queue), deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.ALL, max_ack_pending=self.pull, ack_wait=60))
        self._run(go())

    def delete(self, queue: str) -> None:
        try:
            self._run(self.js.delete_stream(queue))
        except nats.js.errors.NotFoundError:
            pass

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        async def go() -> None:
            subj = subject(queue)
            futures = [await self.js.publish_async(subj, body) for body in bodies]
            await asyncio.gather(*futures)
        self._run(go())

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        async def go() -> int:
            done: asyncio.Future[None] = self.loop.create_future()
            got = 0

            async def on_message(msg: Msg) -> None:
                nonlocal got
                if got >= n:
                    return  # past n: left unacked, delivered again after ack_wait
                got += 1
                if on_body is not None:
                    on_body(msg.data)
                if got % ACK_EVERY == 0 or got == n:
                    await msg.ack()  # AckAll: acknowledges every earlier message too
                if got == n and not done.done():
                    done.set_result(None)

            sub = await self.nc.subscribe(deliver_subject(queue), cb=on_message)
            try:
                await asyncio.wait_for(done, timeout=max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                raise ConsumeTimeout(f"nats: {got}/{n} messages before the deadline") from None
            finally:
                await sub.unsubscribe()
            await self.nc.flush()  # the last ack has reached the server before we report
            return got
        return self._run(go())
