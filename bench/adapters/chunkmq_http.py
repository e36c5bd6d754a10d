"""chunkmq over its REST API (docs/api.md): batched publish straight to a queue, long-poll pull, cumulative ack.

JSON bodies, the default wire, except in bulk phases (B's publishes of 1,000; the pulls of up to the
window of 1,000 in W2, B and D): there the publish body and the pull answer are binary batches
(`application/vnd.chunkmq.batch`, docs/api.md "Binary batches"), which the docs give as the fast way
to move large batches, encoded and decoded by the Python client's own codec (app/client/_batch.py;
pull answers as columns, as `Client.pull_batch` gives them) over the same http.client connection.
W1's publishes of 100 stay JSON: binary saved no server CPU there (docs/benchmarks.md, client
setups).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.adapters.http import HttpJson
from chunkmq.client import _batch

GROUP = "bench"
_SEND_BATCH = {"content-type": _batch.MEDIA_TYPE, "accept": _batch.MEDIA_TYPE}
_ASK_BATCH = {"accept": _batch.MEDIA_TYPE}


class ChunkmqHttpAdapter(Adapter):
    name = "chunkmq-http"
    server = "chunkmq"
    setup = ("http.client keep-alive, JSON: one publish request per batch; long-poll pull of up to the pull "
             "window, each pull carrying the previous batch's cumulative ack; binary batch bodies "
             "(application/vnd.chunkmq.batch) for the pulls' answers in W2, B and D and for B's publishes")

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

    def batch(self, path: str, body: object | None, content: bytes | None, headers: dict[str, str]) -> bytes:
        """A call with a binary batch answer (and body, given `content`)."""
        status, raw = self.http.request("POST", path, body, content=content, headers=headers)
        if status >= 400:
            raise RuntimeError(f"chunkmq POST {path}: {status} {raw[:300]!r}")
        return raw

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        path = f"/queues/{queue}/publish"
        texts = [b.decode() for b in bodies]  # text bodies, as in the JSON form
        if self.bulk:
            answer = self.batch(path, None, _batch.encode(texts), _SEND_BATCH)
            (stored,) = _batch.COUNT.unpack_from(answer)
        else:
            stored = len(self.call("POST", path, {"messages": [{"body": t} for t in texts]})["results"])
        if stored != len(bodies):
            raise RuntimeError(f"chunkmq: {stored} results for {len(bodies)} messages")

    def pull_batch(self, path: str, queue: str, body: dict[str, object]) -> tuple[int, list[str]]:
        """The offset after the last delivered message (0 for none) and the bodies, from a JSON
        answer or (bulk) a binary one decoded as columns, as the client's pull_batch does."""
        if self.bulk:
            got = _batch.decode_batch(self.batch(path, body, None, _ASK_BATCH), queue)
            return got.next_offset or 0, got.bodies  # type: ignore[return-value]
        msgs = self.call("POST", path, body)["messages"]
        return (msgs[-1]["offset"] + 1 if msgs else 0), [m["body"] for m in msgs]

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
            up_to, texts = self.pull_batch(pull, queue, body)
            pending = None
            if not texts:
                continue
            if on_body is not None:
                for text in texts:
                    on_body(text.encode())
            pending = {"up_to": up_to}
            got += len(texts)
        if pending is not None:
            self.call("POST", ack, pending)
        return got
