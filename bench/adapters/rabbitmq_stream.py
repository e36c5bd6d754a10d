"""RabbitMQ streams over the stream protocol (rstream): batches published with confirms awaited per
batch, a named consumer whose stored offset is the group position (stored every 100 messages).

A stream is RabbitMQ's append-only log, the closest thing it has to chunkmq's queue: consumers read
by offset and the server keeps each named consumer's offset, as chunkmq keeps a group's position.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from importlib.metadata import version
from typing import Any, TypeVar

from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetNotFound,
    OffsetType,
    Producer,
)
from rstream.exceptions import StreamNotAvailable

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody

T = TypeVar("T")
GROUP = "bench"
STORE_EVERY = 100
CREDIT = 10  # chunks in flight per subscription (rstream's default)


class RabbitmqStreamAdapter(Adapter):
    name = "rabbitmq-stream"
    server = "rabbitmq"
    setup = (f"rstream {version('rstream')}; send_batch of the whole batch, then its publish confirms "
             f"awaited; a named consumer ({CREDIT} chunks of credit) storing its offset every 100 messages")
    no_fsync_before_ack = ("RabbitMQ streams confirm once written to the OS; they never fsync "
                           "(replication is their durability)")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        port = int(self.endpoint.extra["stream_port"])
        auth = {"username": "guest", "password": "guest"}
        self.producer = Producer("127.0.0.1", port, **auth)
        self.consumer = Consumer("127.0.0.1", port, **auth)
        self._run(self.producer.start())
        self._run(self.consumer.start())

    def close(self) -> None:
        self._run(self.consumer.close())
        self._run(self.producer.close())
        self.loop.close()

    def declare(self, queue: str) -> None:
        self._run(self.producer.create_stream(queue, exists_ok=True))

    def delete(self, queue: str) -> None:
        self._run(self.producer.delete_stream(queue, missing_ok=True))

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        async def go() -> None:
            done: asyncio.Future[None] = self.loop.create_future()
            left = len(bodies)

            def on_confirm(status: ConfirmationStatus) -> None:
                nonlocal left
                if not status.is_confirmed and not done.done():
                    done.set_exception(RuntimeError(f"rabbitmq-stream: publish failed ({status.response_code})"))
                left -= 1
                if left == 0 and not done.done():
                    done.set_result(None)

            await self.producer.send_batch(queue, list(bodies), on_publish_confirm=on_confirm)
            await asyncio.wait_for(done, 60)
        self._run(go())

    async def _start_offset(self, queue: str, deadline: float) -> ConsumerOffsetSpecification:
        """Just after the stored offset (the group's position), or the first message if none is stored.

        After a restart the node answers before its streams are back; until then the stream is
        "not available", and that wait is part of the drain's time.
        """
        while True:
            try:
                stored = await self.consumer.query_offset(queue, GROUP)
                return ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1)
            except OffsetNotFound:
                return ConsumerOffsetSpecification(OffsetType.FIRST, None)
            except StreamNotAvailable:
                if time.monotonic() > deadline:
                    raise ConsumeTimeout(f"rabbitmq-stream: {queue} not available before the deadline") from None
                await asyncio.sleep(0.05)

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        async def go() -> int:
            start = await self._start_offset(queue, deadline)
            done: asyncio.Future[None] = self.loop.create_future()
            got = 0

            async def on_message(body: AMQPMessage, ctx: MessageContext) -> None:
                nonlocal got
                if got >= n:
                    return  # past n: not stored, read again by the next consume
                got += 1
                if on_body is not None:
                    on_body(bytes(body))
                if got % STORE_EVERY == 0 or got == n:
                    await self.consumer.store_offset(queue, GROUP, ctx.offset)
                if got == n and not done.done():
                    done.set_result(None)

            sub = await self.consumer.subscribe(queue, on_message, offset_specification=start,
                                                subscriber_name=GROUP, initial_credit=CREDIT)
            try:
                await asyncio.wait_for(done, timeout=max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                raise ConsumeTimeout(f"rabbitmq-stream: {got}/{n} messages before the deadline") from None
            finally:
                await self.consumer.unsubscribe(sub)
            return got
        return self._run(go())
