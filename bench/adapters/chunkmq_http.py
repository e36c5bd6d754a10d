"""chunkmq over its REST API through the public Python client (`chunkmq.Client`, docs/client.md), as
every peer is driven through its own client library: one `publish_to_queue` per batch, long-poll
`pull_batch` (the messages as columns) whose next call carries the previous batch's cumulative ack.
The client picks the wire itself: binary batches for publishes of plain text bodies and for pull
answers, over kept-alive `http.client` connections.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from chunkmq import Client, NotFound

GROUP = "bench"
CONSUMER = "c1"


class ChunkmqHttpAdapter(Adapter):
    name = "chunkmq-http"
    server = "chunkmq"
    setup = ("chunkmq.Client (kept-alive http.client connections; binary batch bodies, the client's default): "
             "publish_to_queue per batch; pull_batch of up to the pull window, each pull carrying the previous "
             "batch's cumulative ack (ack_up_to)")

    def open(self) -> None:
        self.client = Client(f"http://127.0.0.1:{self.endpoint.http_port}", token=self.endpoint.extra.get("token"))

    def close(self) -> None:
        self.client.close()

    def declare(self, queue: str) -> None:
        self.client.declare_queue(queue)
        self.client.declare_group(queue, GROUP, start="earliest")

    def delete(self, queue: str) -> None:
        try:
            self.client.delete_queue(queue, force=True)
        except NotFound:
            pass

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        texts = [b.decode() for b in bodies]  # text bodies
        stored = len(self.client.publish_to_queue(queue, texts))
        if stored != len(bodies):
            raise RuntimeError(f"chunkmq: {stored} results for {len(bodies)} messages")

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        done: int | None = None  # the last batch's cumulative ack, carried by the next pull
        while got < n:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise ConsumeTimeout(f"chunkmq-http: {got}/{n} messages before the deadline")
            batch = self.client.pull_batch(queue, GROUP, min(self.pull, n - got), min(left_ms, 1000), CONSUMER,
                                           ack_up_to=done)
            done = None
            if not batch:
                continue
            if on_body is not None:
                for body in batch.bodies:
                    on_body(body.encode() if isinstance(body, str) else body)
            done = batch.next_offset
            got += len(batch)
        if done is not None:
            self.client.ack(queue, GROUP, up_to=done)
        return got
