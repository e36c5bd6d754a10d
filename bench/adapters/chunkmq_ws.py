"""chunkmq over its WebSocket streams (API.md): publish frames with confirms, consume with credit."""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib.metadata import version

import orjson
from websockets.sync.client import ClientConnection, connect

from bench.adapters.base import ConsumeTimeout, OnBody
from bench.adapters.chunkmq_http import GROUP, ChunkmqHttpAdapter
from chunkmq.client import _batch

ACK_EVERY = 100  # messages per cumulative ack, as the NATS and RabbitMQ adapters ack


class ChunkmqWsAdapter(ChunkmqHttpAdapter):
    """Declares and deletes over REST (there is no WebSocket for that); moves messages over WebSocket."""

    name = "chunkmq-ws"
    setup = (f"websockets {version('websockets')} sync client: one publish frame per batch (JSON; binary "
             "batches in B), its confirm awaited; a consumer stream (format=binary in W2, B and D: binary "
             "batches decoded as columns by the Python client's codec; JSON frames in W4) with credit = the "
             "pull window, refilled once half of it is used, a cumulative ack every 100 messages")

    def open(self) -> None:
        super().open()
        self.ws_base = f"ws://127.0.0.1:{self.endpoint.http_port}/api/v1"
        self.publishers: dict[str, ClientConnection] = {}
        self.seq = 0

    def close(self) -> None:
        for ws in self.publishers.values():
            ws.close()
        super().close()

    def _publisher(self) -> ClientConnection:
        # One stream on the default exchange serves every queue: the routing key names the queue. Bulk
        # phases (B's batches of 1,000) publish binary batches on a stream opened with format=binary.
        query = "?format=binary" if self.bulk else ""
        ws = self.publishers.get(query)
        if ws is None:
            ws = self.publishers[query] = connect(f"{self.ws_base}/exchanges/amq.default/stream{query}",
                                                  max_size=None, compression=None)
        return ws

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        ws = self._publisher()
        self.seq += 1  # a binary frame's seq is its number on the stream; one stream per adapter kind
        texts = [b.decode() for b in bodies]  # text bodies, as in the JSON form
        if self.bulk:
            ws.send(_batch.encode(texts, routing_key=queue))
        else:
            ws.send(orjson.dumps({"type": "publish", "seq": self.seq,
                                  "messages": [{"body": t, "routing_key": queue} for t in texts]}))
        while True:
            frame = orjson.loads(ws.recv(timeout=60))
            if frame.get("seq") != self.seq:
                continue
            if frame["type"] != "confirm":
                raise RuntimeError(f"chunkmq-ws publish: {frame}")
            if len(frame["results"]) != len(bodies):
                raise RuntimeError("chunkmq-ws: confirm does not cover the batch")
            return

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        # Bulk phases (W2, B, D: windows of 1,000) stream format=binary, as app/client's consumer asks:
        # messages come as binary batches, the rest as JSON text. W4's frames of one message stay
        # JSON, as over HTTP: a binary batch of one costs both sides more than its JSON object.
        url = f"{self.ws_base}/queues/{queue}/groups/{GROUP}/stream?consumer=c1" + ("&format=binary" if self.bulk else "")
        got = acked = used = 0
        with connect(url, max_size=None, compression=None) as ws:
            ws.send(orjson.dumps({"type": "credit", "n": min(self.pull, n)}))
            credited = min(self.pull, n)
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConsumeTimeout(f"chunkmq-ws: {got}/{n} messages before the deadline")
                try:
                    raw = ws.recv(timeout=min(left, 1.0))
                except TimeoutError:
                    continue
                if self.bulk:
                    if isinstance(raw, str):  # JSON: an error (acks carry no seq, so no acked frames)
                        raise RuntimeError(f"chunkmq-ws consume: {raw}")
                    batch = _batch.decode_batch(raw, queue)  # columns, as the client's pull_batch gives them
                    offsets, bodies = batch.offsets, batch.bodies
                else:
                    frame = orjson.loads(raw)
                    if frame.get("type") != "messages":
                        raise RuntimeError(f"chunkmq-ws consume: {frame}")
                    offsets = [m["offset"] for m in frame["messages"]]
                    bodies = [m["body"] for m in frame["messages"]]
                if on_body is not None:
                    for body in bodies:
                        on_body(body.encode() if isinstance(body, str) else body)
                got += len(offsets)
                used += len(offsets)
                # As app/client's consumer does: a cumulative ack every ACK_EVERY messages (and at the
                # end), and the used credit granted again once half the window is used.
                if got - acked >= ACK_EVERY or got >= n:
                    ws.send(orjson.dumps({"type": "ack", "up_to": offsets[-1] + 1}))
                    acked = got
                more = min(used, n - credited)
                if more > 0 and used >= max(1, self.pull // 2):
                    ws.send(orjson.dumps({"type": "credit", "n": more}))
                    credited += more
                    used = 0
        return got
