"""chunkmq over its REST API (API.md): batched publish straight to a queue, long-poll pull, cumulative ack."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.adapters.http import HttpJson

GROUP = "bench"


class ChunkmqHttpAdapter(Adapter):
    name = "chunkmq-http"
    server = "chunkmq"
    setup = ("http.client keep-alive, JSON: one publish request per batch; long-poll pull of up to the pull "
             "window, each pull carrying the previous batch's cumulative ack")

    def open(self) -> None:
        self.http = HttpJson(self.endpoint.http_port, "/api/v1")

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: object | None = None) -> Any:
        return self.http.json(method, path, body, who="chunkmq")

    def declare(self, queue: str) -> None:
        self.call("PUT", f"/queues/{queue}", {})
        self.call("PUT", f"/queues/{queue}/groups/{GROUP}", {"start": "earliest"})

    def delete(self, queue: str) -> None:
        self.call("DELETE", f"/queues/{queue}?force=true")

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        answer = self.call("POST", f"/queues/{queue}/publish",
                           {"messages": [{"body": b.decode()} for b in bodies]})
        if len(answer["results"]) != len(bodies):
            raise RuntimeError(f"chunkmq: {len(answer['results'])} results for {len(bodies)} messages")

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        pull, ack = f"/queues/{queue}/groups/{GROUP}/pull", f"/queues/{queue}/groups/{GROUP}/ack"
        pending: dict[str, int] | None = None  # the last batch's ack, carried by the next pull
        while got < n:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise ConsumeTimeout(f"chunkmq-http: {got}/{n} messages before the deadline")
            body: dict[str, object] = {"max_messages": min(self.pull, n - got), "wait_ms": min(left_ms, 1000),
                                       "consumer": "c1"}
            if pending is not None:
                body["ack"] = pending
            msgs = self.call("POST", pull, body)["messages"]
            pending = None
            if not msgs:
                continue
            if on_body is not None:
                for m in msgs:
                    on_body(m["body"].encode())
            pending = {"up_to": msgs[-1]["offset"] + 1}
            got += len(msgs)
        if pending is not None:
            self.call("POST", ack, pending)
        return got
