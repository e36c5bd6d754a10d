"""NATS JetStream (nats-py): async publish acked per batch, a durable pull consumer with AckAll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody

T = TypeVar("T")
DURABLE = "bench"


def subject(queue: str) -> str:
    return f"bench.{queue}"


class NatsJetStreamAdapter(Adapter):
    name = "nats"
    server = "nats"

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self._run(nats.connect(f"nats://127.0.0.1:{self.endpoint.port}", max_reconnect_attempts=0))
        self.js = self.nc.jetstream(timeout=30)
        self.subs: dict[str, Any] = {}

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.close()

    def declare(self, queue: str) -> None:
        async def go() -> None:
            await self.js.add_stream(name=queue, subjects=[subject(queue)], storage=StorageType.FILE)
            await self.js.add_consumer(queue, ConsumerConfig(
                durable_name=DURABLE, ack_policy=AckPolicy.ALL, max_ack_pending=-1, ack_wait=60))
        self._run(go())

    def delete(self, queue: str) -> None:
        try:
            self._run(self.js.delete_stream(queue))
        except nats.js.errors.NotFoundError:
            pass
        self.subs.pop(queue, None)

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        async def go() -> None:
            subj = subject(queue)
            futures = [await self.js.publish_async(subj, body) for body in bodies]
            await asyncio.gather(*futures)
        self._run(go())

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        async def go() -> int:
            sub = self.subs.get(queue)
            if sub is None:
                sub = self.subs[queue] = await self.js.pull_subscribe_bind(DURABLE, stream=queue)
            got = 0
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConsumeTimeout(f"nats: {got}/{n} messages before the deadline")
                try:
                    msgs = await sub.fetch(batch=min(self.pull, n - got), timeout=min(left, 1.0))
                except nats.errors.TimeoutError:
                    continue
                if on_body is not None:
                    for m in msgs:
                        on_body(m.data)
                await msgs[-1].ack()  # AckAll: acknowledges every earlier message too
                got += len(msgs)
            return got
        return self._run(go())
