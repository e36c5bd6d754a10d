"""RabbitMQ over AMQP 0-9-1 with aio-pika: persistent messages, publisher confirms awaited per batch,
a prefetch window and multiple-acks on consume."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from importlib.metadata import version
from typing import Any, TypeVar

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.adapters.rabbitmq_pika import queue_arguments

T = TypeVar("T")
ACK_EVERY = 100


class RabbitmqAioPikaAdapter(Adapter):
    """The asyncio client, for comparison (`--peers rabbitmq-aiopika`); pika is faster on this workload."""

    name = "rabbitmq-aiopika"
    server = "rabbitmq"
    setup = (f"aio-pika {version('aio-pika')}; persistent messages, publisher confirms pipelined (the batch's "
             "publishes gathered); queue.consume with prefetch = the pull window, a multiple-ack every 100")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()

        async def go() -> None:
            self.conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{self.endpoint.port}/")
            self.channel = await self.conn.channel(publisher_confirms=True)
            await self.channel.set_qos(prefetch_count=self.pull)
        self._run(go())

    def close(self) -> None:
        self._run(self.conn.close())
        self.loop.close()

    def declare(self, queue: str) -> None:
        self._run(self.channel.declare_queue(queue, durable=True, arguments=queue_arguments(self.endpoint)))

    def delete(self, queue: str) -> None:
        self._run(self.channel.queue_delete(queue))

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        exchange = self.channel.default_exchange
        persistent = aio_pika.DeliveryMode.PERSISTENT

        async def go() -> None:
            await asyncio.gather(*(
                exchange.publish(aio_pika.Message(body, delivery_mode=persistent), routing_key=queue)
                for body in bodies))
        self._run(go())

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        async def go() -> int:
            q = await self.channel.get_queue(queue, ensure=False)
            done: asyncio.Future[None] = self.loop.create_future()
            got = 0

            async def on_message(msg: AbstractIncomingMessage) -> None:
                nonlocal got
                if got >= n:
                    return  # past n: left unacked, requeued when we cancel
                got += 1
                if on_body is not None:
                    on_body(msg.body)
                if got % ACK_EVERY == 0 or got == n:
                    await msg.ack(multiple=True)
                if got == n and not done.done():
                    done.set_result(None)

            tag = await q.consume(on_message)
            try:
                await asyncio.wait_for(done, timeout=max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                raise ConsumeTimeout(f"rabbitmq: {got}/{n} messages before the deadline") from None
            finally:
                await q.cancel(tag)
            return got
        return self._run(go())
