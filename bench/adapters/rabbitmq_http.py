"""RabbitMQ's own HTTP API (the management plugin): one message per publish, `get` with ack mode.

This is the peer for chunkmq's REST API. The management API is meant for diagnostics, not throughput:
each publish is one request and one message, and that is the limit the workload measures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.adapters.http import HttpJson
from bench.adapters.rabbitmq_pika import queue_arguments

VHOST = quote("/", safe="")


class RabbitmqHttpAdapter(Adapter):
    name = "rabbitmq-http"
    server = "rabbitmq"
    setup = ("the management plugin's HTTP API over http.client keep-alive: one persistent message per "
             "publish request, `get` of up to the pull window with ack_requeue_false")

    def open(self) -> None:
        self.http = HttpJson(self.endpoint.http_port, "/api", user="guest", password="guest")

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, body: object | None = None) -> Any:
        return self.http.json(method, path, body, who="rabbitmq-http")

    def declare(self, queue: str) -> None:
        self._call("PUT", f"/queues/{VHOST}/{quote(queue)}",
                   {"durable": True, "arguments": queue_arguments(self.endpoint)})

    def delete(self, queue: str) -> None:
        self._call("DELETE", f"/queues/{VHOST}/{quote(queue)}")

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        path = f"/exchanges/{VHOST}/amq.default/publish"
        for body in bodies:
            answer = self._call("POST", path, {"properties": {"delivery_mode": 2}, "routing_key": queue,
                                               "payload": body.decode(), "payload_encoding": "string"})
            if not answer.get("routed"):
                raise RuntimeError(f"rabbitmq-http: message to {queue} not routed")

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        path = f"/queues/{VHOST}/{quote(queue)}/get"
        while got < n:
            if time.monotonic() > deadline:
                raise ConsumeTimeout(f"rabbitmq-http: {got}/{n} messages before the deadline")
            msgs = self._call("POST", path, {"count": min(self.pull, n - got), "ackmode": "ack_requeue_false",
                                             "encoding": "auto"})
            if not msgs:
                time.sleep(0.01)  # the API cannot wait for messages; a short pause bounds the polling
                continue
            if on_body is not None:
                for m in msgs:
                    on_body(m["payload"].encode())
            got += len(msgs)
        return got
