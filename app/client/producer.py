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
import concurrent.futures
import contextlib
import secrets
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from chunkmq.client import _batch
from chunkmq.client._calls import NO_JSON, MessageLike, encode_messages, exchange_path, to_publish
from chunkmq.client._ws import Backoff, LoopThread, Lost, closed_error, frame_error, open_stream, ws_url
from chunkmq.client.errors import ChunkmqError, ConnectionFailed
from chunkmq.client.models import Published, PublishResult


def _size(frame: _Frame) -> int:
    return frame.messages if isinstance(frame.messages, int) else len(frame.messages)


@dataclass(eq=False, slots=True)
class _Frame:
    messages: list[dict[str, Any]] | int  # JSON messages, or the count of a binary batch
    futures: list[asyncio.Future[PublishResult]] | None  # one per message (single publishes)
    batch: asyncio.Future[Published] | None  # or one for the frame (publish_batch)
    mandatory: bool = False
    sealed: bool = False  # no more single publishes join it
    seq: int = -1
    payload: str | bytes = field(default="", repr=False)  # text: a JSON frame; bytes: a binary batch


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
        # format=binary: a batch whose messages need no JSON goes as a binary frame; JSON goes as text.
        self._url = ws_url(url, f"/api/v1/exchanges/{exchange_path(exchange)}/stream", {"format": "binary"})
        self._binary_seq = 0  # binary frames sent on this connection: their seq in the confirms
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
        if last is None or last.sealed or last.futures is None or _size(last) >= self.batch_size:
            last = _Frame([], [], None)
            self._waiting.append(last)
        assert isinstance(last.messages, list)
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
        """Queue one atomic batch; returns the future of its confirm. A batch of str and bytes bodies
        (no headers, tags or idempotency keys) goes as a binary frame."""
        batch = None
        if not mandatory and not self.idempotent and isinstance(messages, list) and messages:
            batch = _batch.encode_if_plain(messages, routing_key)  # TypeError for what is not a message
        if batch is not None:
            frame = _Frame(len(messages), None, None, sealed=True, payload=batch)  # type: ignore[arg-type]
            return await self._queue_batch(frame)
        encoded = [self._keyed(m) for m in encode_messages(messages, routing_key)]
        return await self._queue_batch(_Frame(encoded, None, None, mandatory, sealed=True))

    async def _queue_batch(self, frame: _Frame) -> asyncio.Future[Published]:
        await self._wait_for_room()
        future: asyncio.Future[Published] = asyncio.get_running_loop().create_future()
        frame.batch = future
        if self._waiting:
            self._waiting[-1].sealed = True  # keep the order of sends: nothing joins a frame before this one
        self._waiting.append(frame)
        self._queued(_size(frame))
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
        self._unconfirmed -= _size(frame)
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
                self._binary_seq = 0
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
            if isinstance(frame.payload, bytes):  # binary frames are numbered per connection
                self._binary_seq += 1
                frame.seq = self._binary_seq
            elif not frame.payload:
                self._seq += 1
                frame.seq = self._seq
                frame.payload = orjson.dumps({"type": "publish", "seq": frame.seq, "messages": frame.messages,
                                              "mandatory": frame.mandatory}).decode()
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


class Producer:
    """The blocking twin of AsyncProducer (`Client.producer`): the same producer, with the same
    batching, pipelining and reconnects, runs on an event loop in a thread of its own.

        with client.producer("") as producer:
            producer.publish_batch(["a", "b"], routing_key="orders")  # waits for the confirm
            futures = [producer.send(f"m{n}", routing_key="orders") for n in range(1000)]  # pipelined
            results = [f.result() for f in futures]
    """

    def __init__(self, url: str, token: str | None, exchange: str, *, batch_size: int = 100,
                 max_in_flight: int = 10, idempotent: bool = False, retry_for: float = 60.0) -> None:
        self._async = AsyncProducer(url, token, exchange, batch_size=batch_size, max_in_flight=max_in_flight,
                                    idempotent=idempotent, retry_for=retry_for)
        self._loop = LoopThread(f"chunkmq-producer-{exchange or 'amq.default'}")

    @property
    def reconnects(self) -> int:
        return self._async.reconnects

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()

    def start(self) -> None:
        """Open the stream (see AsyncProducer.start)."""
        try:
            self._loop.call(self._async.start())
        except BaseException:
            self._loop.stop()
            raise

    def publish(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
                headers: Mapping[str, str] | None = None, tag: str | None = None,
                idempotency_key: str | None = None) -> PublishResult:
        """Publish one message and wait for its confirm (`send` does not wait)."""
        return self._loop.call(self._async.publish(body, json=json, routing_key=routing_key, headers=headers, tag=tag,
                                                   idempotency_key=idempotency_key))

    def send(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
             headers: Mapping[str, str] | None = None, tag: str | None = None,
             idempotency_key: str | None = None) -> concurrent.futures.Future[PublishResult]:
        """Queue one message, batched with others; returns the future of its confirm at once."""
        return self._loop.submit(self._async.publish(body, json=json, routing_key=routing_key,  # type: ignore[no-any-return]
                                                     headers=headers, tag=tag, idempotency_key=idempotency_key))

    def publish_batch(self, messages: Iterable[MessageLike], *, routing_key: str = "",
                      mandatory: bool = False) -> Published:
        """Publish one atomic batch (one frame; binary when no message needs JSON) and wait for its confirm."""
        return self._loop.call(self._async.publish_batch(messages, routing_key=routing_key, mandatory=mandatory))

    def flush(self) -> None:
        """Wait until everything sent so far is confirmed."""
        self._loop.call(self._async.flush())

    def close(self) -> None:
        """Close the stream and its thread; publishes not yet confirmed fail with ConnectionFailed."""
        try:
            if self._loop.running:
                self._loop.call(self._async.close())
        finally:
            self._loop.stop()
