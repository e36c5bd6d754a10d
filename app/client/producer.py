"""Publishing over an exchange's WebSocket stream: batched, pipelined, confirmed in order.

    async with client.producer("orders") as producer:
        result = await producer.publish("hello", routing_key="orders.eu")   # waits for its confirm
        future = await producer.send("again", routing_key="orders.eu")      # does not wait
        batch = await producer.publish_batch(["a", "b"], routing_key="x")  # one atomic batch

- Automatic batching: single publishes go out at once while fewer than `max_in_flight` frames await
  their confirm, and pile up into frames of up to `batch_size` messages while the pipe is full, so
  one producer gets low latency when idle and large batches under load.
- Pipelining: up to `max_in_flight` frames are sent before the first confirm; confirms come back in
  frame order and resolve each message's future with its PublishResult (or a typed error).
- Back-pressure: `send` waits while `batch_size * max_in_flight * 4` messages are unconfirmed.
- Reconnects: when the connection is lost (server restart, network), unconfirmed frames are sent
  again, in order, on a new connection opened with exponential backoff for up to `retry_for`
  seconds. That can store a frame twice unless its messages carry idempotency keys: with
  `idempotent=True` the producer gives every message without one a key of its own, so a resent
  frame is answered with the original placements (within the server's dedup window).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from chunkmq.client._calls import NO_JSON, MessageLike, encode_messages, exchange_path, to_publish
from chunkmq.client._ws import Backoff, Lost, closed_error, frame_error, open_stream, ws_url
from chunkmq.client.errors import ChunkmqError, ConnectionFailed
from chunkmq.client.models import Published, PublishResult


@dataclass(eq=False, slots=True)
class _Frame:
    messages: list[dict[str, Any]]
    futures: list[asyncio.Future[PublishResult]] | None  # one per message (single publishes)
    batch: asyncio.Future[Published] | None  # or one for the frame (publish_batch)
    mandatory: bool = False
    sealed: bool = False  # no more single publishes join it
    seq: int = -1
    payload: bytes = field(default=b"", repr=False)


class AsyncProducer:
    """A publisher on one exchange's stream (see the module docstring)."""

    def __init__(self, url: str, token: str | None, exchange: str, *, batch_size: int = 100,
                 max_in_flight: int = 10, idempotent: bool = False, retry_for: float = 60.0) -> None:
        if batch_size < 1 or max_in_flight < 1:
            raise ValueError("batch_size and max_in_flight must be at least 1")
        self.exchange = exchange
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.idempotent = idempotent
        self.retry_for = retry_for
        self.reconnects = 0
        self._token = token
        self._url = ws_url(url, f"/api/v1/exchanges/{exchange_path(exchange)}/stream")
        self._key_prefix = f"p-{secrets.token_hex(8)}-"
        self._keys = 0
        self._waiting: deque[_Frame] = deque()  # not sent yet
        self._in_flight: deque[_Frame] = deque()  # sent, awaiting the confirm, in seq order
        self._unconfirmed = 0  # messages in both
        self._max_unconfirmed = batch_size * max_in_flight * 4
        self._seq = 0
        self._wake = asyncio.Event()  # for the writer: a frame is waiting or room in the pipe
        self._room = asyncio.Event()  # for senders: below _max_unconfirmed
        self._idle = asyncio.Event()  # nothing unconfirmed
        self._idle.set()
        self._room.set()
        self._ws: ClientConnection | None = None
        self._runner: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            await self.flush()
        await self.close()

    async def start(self) -> None:
        """Open the stream (raises when it cannot be opened within retry_for, or is refused)."""
        self._ws = await self._open()
        self._runner = asyncio.create_task(self._run())

    # ------------------------------------------------------------------ publishing

    async def publish(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
                      headers: Mapping[str, str] | None = None, tag: str | None = None,
                      idempotency_key: str | None = None) -> PublishResult:
        """Publish one message (batched with others) and wait for its confirm. The body is a str
        (text), bytes (binary), or `json=value` (the value as JSON text)."""
        return await (await self.send(body, json=json, routing_key=routing_key, headers=headers, tag=tag,
                                      idempotency_key=idempotency_key))

    async def send(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
                   headers: Mapping[str, str] | None = None, tag: str | None = None,
                   idempotency_key: str | None = None) -> asyncio.Future[PublishResult]:
        """Queue one message; returns the future of its confirm. Waits only while too much is unconfirmed."""
        one = to_publish(body, json)
        if not isinstance(one, str | bytes | bytearray | memoryview):
            raise TypeError(f"a producer publishes one str or bytes body (or json=value), not a {type(one).__name__}")
        message = encode_messages([one], routing_key)[0]
        if headers:
            message["headers"] = dict(headers)
        if tag is not None:
            message["tag"] = tag
        if idempotency_key is not None:
            message["idempotency_key"] = idempotency_key
        await self._wait_for_room()
        future: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        last = self._waiting[-1] if self._waiting else None
        if last is None or last.sealed or last.futures is None or len(last.messages) >= self.batch_size:
            last = _Frame([], [], None)
            self._waiting.append(last)
        last.messages.append(self._keyed(message))
        assert last.futures is not None
        last.futures.append(future)
        self._queued(1)
        return future

    async def publish_batch(self, messages: Iterable[MessageLike], *, routing_key: str = "",
                            mandatory: bool = False) -> Published:
        """Publish one atomic batch (one frame) and wait for its confirm."""
        return await (await self.send_batch(messages, routing_key=routing_key, mandatory=mandatory))

    async def send_batch(self, messages: Iterable[MessageLike], *, routing_key: str = "",
                         mandatory: bool = False) -> asyncio.Future[Published]:
        """Queue one atomic batch; returns the future of its confirm."""
        encoded = [self._keyed(m) for m in encode_messages(messages, routing_key)]
        await self._wait_for_room()
        future: asyncio.Future[Published] = asyncio.get_running_loop().create_future()
        if self._waiting:
            self._waiting[-1].sealed = True  # keep the order of sends: nothing joins a frame before this one
        self._waiting.append(_Frame(encoded, None, future, mandatory, sealed=True))
        self._queued(len(encoded))
        return future

    async def flush(self) -> None:
        """Wait until everything sent so far is confirmed (raises if the stream failed)."""
        self._check()
        await self._idle.wait()
        self._check()

    async def close(self) -> None:
        """Close the stream; publishes not yet confirmed fail with ConnectionFailed."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(BaseException):
                await self._runner
            self._runner = None
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        self._fail(self._failure or ConnectionFailed("the producer was closed"))

    # ------------------------------------------------------------------ bookkeeping

    def _keyed(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.idempotent and "idempotency_key" not in message:
            self._keys += 1
            message["idempotency_key"] = f"{self._key_prefix}{self._keys}"
        return message

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._runner is None:
            raise ConnectionFailed("the producer is not started (use `async with` or start())")

    async def _wait_for_room(self) -> None:
        self._check()
        while self._unconfirmed >= self._max_unconfirmed:
            await self._room.wait()
            self._check()

    def _queued(self, n: int) -> None:
        self._unconfirmed += n
        self._idle.clear()
        if self._unconfirmed >= self._max_unconfirmed:
            self._room.clear()
        self._wake.set()

    def _confirmed(self, frame: _Frame, answer: dict[str, Any]) -> None:
        self._unconfirmed -= len(frame.messages)
        if answer.get("type") == "confirm":
            if frame.batch is not None:
                if not frame.batch.done():
                    frame.batch.set_result(Published.from_json(answer))
            else:
                assert frame.futures is not None
                for future, result in zip(frame.futures, answer["results"], strict=True):
                    if not future.done():
                        future.set_result(PublishResult.from_json(result))
        else:
            self._reject(frame, frame_error(answer))
        if self._unconfirmed < self._max_unconfirmed:
            self._room.set()
        if not self._unconfirmed:
            self._idle.set()
        self._wake.set()

    @staticmethod
    def _reject(frame: _Frame, error: BaseException) -> None:
        for future in frame.futures or [frame.batch]:
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: a fire-and-forget send does not log "never retrieved"

    def _fail(self, error: BaseException) -> None:
        """The stream is over: every unconfirmed publish fails with `error`."""
        if self._failure is None:
            self._failure = error
        for frame in (*self._in_flight, *self._waiting):
            self._reject(frame, error)
        self._in_flight.clear()
        self._waiting.clear()
        self._unconfirmed = 0
        self._idle.set()
        self._room.set()

    # ------------------------------------------------------------------ the connection

    async def _open(self) -> ClientConnection:
        backoff = Backoff(self.retry_for)
        while True:
            try:
                return await open_stream(self._url, self._token)
            except Lost as exc:
                await backoff.wait(exc)

    async def _run(self) -> None:
        try:
            while True:
                assert self._ws is not None
                writer = asyncio.create_task(self._write(self._ws))
                try:
                    error = await self._read(self._ws)
                finally:
                    writer.cancel()
                    with contextlib.suppress(BaseException):
                        await writer
                if not isinstance(error, Lost):
                    self._fail(error)
                    return
                # Unconfirmed frames go out again, first and in order, on the next connection.
                self._waiting.extendleft(reversed(self._in_flight))
                self._in_flight.clear()
                self.reconnects += 1
                self._ws = await self._open()
        except asyncio.CancelledError:
            raise
        except ChunkmqError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug here must not leave publishers waiting forever
            self._fail(ConnectionFailed(f"producer stream failed: {exc!r}"))

    async def _write(self, ws: ClientConnection) -> None:
        waiting, in_flight = self._waiting, self._in_flight
        while True:
            if not waiting or len(in_flight) >= self.max_in_flight:
                self._wake.clear()
                await self._wake.wait()
                continue
            frame = waiting.popleft()
            frame.sealed = True
            if not frame.payload:
                self._seq += 1
                frame.seq = self._seq
                frame.payload = orjson.dumps({"type": "publish", "seq": frame.seq, "messages": frame.messages,
                                              "mandatory": frame.mandatory})
            in_flight.append(frame)
            try:
                await ws.send(frame.payload)
            except ConnectionClosed:
                return  # the reader sees it too

    async def _read(self, ws: ClientConnection) -> BaseException:
        """Confirms until the connection ends; returns why it ended (Lost: reconnect)."""
        while True:
            try:
                raw = await ws.recv()
            except ConnectionClosed as exc:
                return closed_error(exc)
            answer = orjson.loads(raw)
            seq = answer.get("seq")
            if answer.get("type") not in ("confirm", "error") or seq is None:
                with contextlib.suppress(Exception):
                    await ws.close()
                return frame_error(answer)
            if not self._in_flight or self._in_flight[0].seq != seq:
                return ConnectionFailed(f"confirm for seq {seq} out of order")
            self._confirmed(self._in_flight.popleft(), answer)
