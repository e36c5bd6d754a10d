"""Redis Streams: XADD in pipelines, XREADGROUP + XACK for the group `bench`."""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody

GROUP = b"bench"


class RedisStreamsAdapter(Adapter):
    name = "redis"
    server = "redis"

    def open(self) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=self.endpoint.port)

    def close(self) -> None:
        self.client.close()

    def declare(self, queue: str) -> None:
        try:
            self.client.xgroup_create(queue, GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def delete(self, queue: str) -> None:
        self.client.delete(queue)

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for body in bodies:
            pipe.xadd(queue, {b"b": body})
        pipe.execute()

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        while got < n:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise ConsumeTimeout(f"redis: {got}/{n} messages before the deadline")
            reply = self.client.xreadgroup(GROUP, b"c1", {queue: b">"}, count=min(self.pull, n - got),
                                           block=min(left_ms, 1000))
            if not reply:
                continue
            entries = reply[0][1]
            if on_body is not None:
                for _id, fields in entries:
                    on_body(fields[b"b"])
            self.client.xack(queue, GROUP, *[entry_id for entry_id, _ in entries])
            got += len(entries)
        return got
