"""chunkmq over its WebSocket streams through the public Python client: `Client.producer` (one
`publish_batch` per batch, its confirm awaited) and `Client.consume` (credit = the pull window;
`next_batch` takes what has arrived, and as the group's one consumer a cumulative `ack_up_to` covers
each batch), both with `reader_thread=False` (docs/client.md "Latency"): the calling thread reads its
own socket, as redis-py's does. Declares and deletes go over REST, as there is no stream for them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib.metadata import version

from bench.adapters.base import ConsumeTimeout, OnBody
from bench.adapters.chunkmq_http import CONSUMER, GROUP, ChunkmqHttpAdapter
from chunkmq import Producer


class ChunkmqWsAdapter(ChunkmqHttpAdapter):
    name = "chunkmq-ws"
    setup = (f"chunkmq.Client streams (websockets {version('websockets')}, reader_thread=False: the calling thread "
             "reads the socket): Client.producer on the default "
             "exchange, one publish_batch per batch (a binary frame), its confirm awaited; Client.consume with "
             "credit = the pull window (binary batches, refilled once half of it is used), next_batch taking what "
             "has arrived and a cumulative ack_up_to per batch")

    def open(self) -> None:
        super().open()
        self.producer: Producer | None = None

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        super().close()

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        if self.producer is None:  # one stream on the default exchange serves every queue
            self.producer = self.client.producer("", reader_thread=False)
            self.producer.start()
        texts = [b.decode() for b in bodies]  # text bodies
        stored = len(self.producer.publish_batch(texts, routing_key=queue))
        if stored != len(bodies):
            raise RuntimeError("chunkmq-ws: confirm does not cover the batch")

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        credit = max(1, min(self.pull, n))
        with self.client.consume(queue, GROUP, consumer=CONSUMER, credit=credit, auto_ack=False,
                                 reader_thread=False) as stream:
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConsumeTimeout(f"chunkmq-ws: {got}/{n} messages before the deadline")
                batch = stream.next_batch(timeout=min(left, 1.0), max_messages=n - got)
                if not batch:
                    continue
                if on_body is not None:
                    for message in batch:
                        body = message.body
                        on_body(body.encode() if isinstance(body, str) else body)
                got += len(batch)
                stream.ack_up_to(batch[-1].offset + 1)  # the whole batch, cumulatively
        return got
