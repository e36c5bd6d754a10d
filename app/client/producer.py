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
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection as SyncConnection

from chunkmq.client import _batch
from chunkmq.client._calls import NO_JSON, MessageLike, encode_messages, exchange_path, to_publish
from chunkmq.client._ws import (
    Backoff,
    DirectConnection,
    Lost,
    closed_error,
    frame_error,
    open_stream,
    open_sync_stream,
    ws_url,
)
from chunkmq.client.errors import ChunkmqError, ConnectionFailed
from chunkmq.client.models import Published, PublishResult


def _size(frame: _Frame) -> int:
    return frame.messages if isinstance(frame.messages, int) else len(frame.messages)


@dataclass(eq=False, slots=True)
class _Frame:
    messages: list[dict[str, Any]] | int  # JSON messages, or the count of a binary batch
    futures: list[Any] | None  # one per message (single publishes): asyncio or concurrent futures
    batch: Any  # or one for the frame (publish_batch)
    mandatory: bool = False
    sealed: bool = False  # no more single publishes join it
    seq: int = -1
    payload: str | bytes = field(default="", repr=False)  # text: a JSON frame; bytes: a binary batch


def _one_message(body: str | bytes | None, json: Any, routing_key: str, headers: Mapping[str, str] | None,
                 tag: str | None, idempotency_key: str | None, ttl_ms: int | None = None) -> dict[str, Any]:
    one = to_publish(body, json)
    if not isinstance(one, str | bytes | bytearray | memoryview):
        raise TypeError(f"a producer publishes one str or bytes body (or json=value), not a {type(one).__name__}")
    message = encode_messages([bytes(one) if isinstance(one, bytearray | memoryview) else one], routing_key)[0]
    if headers:
        message["headers"] = dict(headers)
    if tag is not None:
        message["tag"] = tag
    if idempotency_key is not None:
        message["idempotency_key"] = idempotency_key
    if ttl_ms is not None:
        message["ttl_ms"] = ttl_ms
    return message


def _batch_frame(messages: Iterable[MessageLike], routing_key: str, mandatory: bool, idempotent: bool,
                 keyed: Callable[[dict[str, Any]], dict[str, Any]]) -> _Frame:
    """The frame of one atomic batch: binary when no message needs JSON (and the batch is not
    mandatory, which a binary frame cannot say, nor keyed by an idempotent producer)."""
    if not mandatory and not idempotent and isinstance(messages, list) and messages:
        batch = _batch.encode_if_plain(messages, routing_key)  # TypeError for what is not a message
        if batch is not None:
            return _Frame(len(messages), None, None, sealed=True, payload=batch)
    return _Frame([keyed(m) for m in encode_messages(messages, routing_key)], None, None, mandatory, sealed=True)


def _settle(frame: _Frame, answer: dict[str, Any]) -> None:
    """Resolve a frame's futures from its confirm (or error)."""
    if answer.get("type") != "confirm":
        _reject(frame, frame_error(answer))
    elif frame.batch is not None:
        if not frame.batch.done():
            frame.batch.set_result(Published.from_json(answer))
    else:
        assert frame.futures is not None
        for future, result in zip(frame.futures, answer["results"], strict=True):
            if not future.done():
                future.set_result(PublishResult.from_json(result))


def _reject(frame: _Frame, error: BaseException) -> None:
    for future in frame.futures or [frame.batch]:
        if future is not None and not future.done():
            future.set_exception(error)
            future.exception()  # retrieved: a fire-and-forget send does not log "never retrieved"


class _Frames:
    """What both producers hold alike: their settings and stream URL, and what they number:
    message idempotency keys (idempotent producers), JSON frames' seq (once), binary frames' seq (per
    connection, reset by the owner on reconnect)."""

    def __init__(self, url: str, token: str | None, exchange: str, *, batch_size: int = 100,
                 max_in_flight: int = 10, idempotent: bool = False, retry_for: float = 60.0) -> None:
        if batch_size < 1 or max_in_flight < 1:
            raise ValueError("batch_size and max_in_flight must be at least 1")
        self.exchange = exchange
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.retry_for = retry_for
        self.reconnects = 0
        self._token = token
        # format=binary: a batch whose messages need no JSON goes as a binary frame; JSON goes as text.
        self._url = ws_url(url, f"/api/v1/exchanges/{exchange_path(exchange)}/stream", {"format": "binary"})
        self.idempotent = idempotent
        self._key_prefix = f"p-{secrets.token_hex(8)}-"
        self._keys = 0
        self._seq = 0
        self._binary_seq = 0  # binary frames sent on this connection: their seq in the confirms

    def _number(self, frame: _Frame) -> None:
        """Give a frame about to be sent its seq (and a JSON frame its payload, once)."""
        if isinstance(frame.payload, bytes):  # binary frames are numbered per connection
            self._binary_seq += 1
            frame.seq = self._binary_seq
        elif not frame.payload:
            self._seq += 1
            frame.seq = self._seq
            frame.payload = orjson.dumps({"type": "publish", "seq": frame.seq, "messages": frame.messages,
                                          "mandatory": frame.mandatory}).decode()

    def _keyed(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.idempotent and "idempotency_key" not in message:
            self._keys += 1
            message["idempotency_key"] = f"{self._key_prefix}{self._keys}"
        return message


class AsyncProducer(_Frames):
    """A publisher on one exchange's stream (see the module docstring)."""

    def __init__(self, url: str, token: str | None, exchange: str, *, batch_size: int = 100,
                 max_in_flight: int = 10, idempotent: bool = False, retry_for: float = 60.0) -> None:
        super().__init__(url, token, exchange, batch_size=batch_size, max_in_flight=max_in_flight,
                         idempotent=idempotent, retry_for=retry_for)
        self._waiting: deque[_Frame] = deque()  # not sent yet
        self._in_flight: deque[_Frame] = deque()  # sent, awaiting the confirm, in seq order
        self._unconfirmed = 0  # messages in both
        self._max_unconfirmed = batch_size * max_in_flight * 4
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
                      idempotency_key: str | None = None, ttl_ms: int | None = None) -> PublishResult:
        """Publish one message (batched with others) and wait for its confirm. The body is a str
        (text), bytes (binary), or `json=value` (the value as JSON text)."""
        return await (await self.send(body, json=json, routing_key=routing_key, headers=headers, tag=tag,
                                      idempotency_key=idempotency_key, ttl_ms=ttl_ms))

    async def send(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
                   headers: Mapping[str, str] | None = None, tag: str | None = None,
                   idempotency_key: str | None = None, ttl_ms: int | None = None) -> asyncio.Future[PublishResult]:
        """Queue one message; returns the future of its confirm. Waits only while too much is unconfirmed."""
        message = _one_message(body, json, routing_key, headers, tag, idempotency_key, ttl_ms)
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
        frame = _batch_frame(messages, routing_key, mandatory, self.idempotent, self._keyed)
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
        _settle(frame, answer)
        if self._unconfirmed < self._max_unconfirmed:
            self._room.set()
        if not self._unconfirmed:
            self._idle.set()
        self._wake.set()


    def _fail(self, error: BaseException) -> None:
        """The stream is over: every unconfirmed publish fails with `error`."""
        if self._failure is None:
            self._failure = error
        for frame in (*self._in_flight, *self._waiting):
            _reject(frame, error)
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
            self._number(frame)
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


class _Confirm(concurrent.futures.Future):  # type: ignore[type-arg]
    """The future of a blocking producer's `send`: asked for its result, it drives the producer."""

    def __init__(self, producer: Producer) -> None:
        super().__init__()
        self._producer = producer

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            self._producer._settle_until(self)
        return super().result(timeout)


class Producer(_Frames):
    """The blocking twin of AsyncProducer (`Client.producer`): the same frames, pipelining and
    reconnects, on websockets' blocking client, so a publish never waits for another thread.

        with client.producer("") as producer:
            producer.publish_batch(["a", "b"], routing_key="orders")  # waits for the confirm
            futures = [producer.send(f"m{n}", routing_key="orders") for n in range(1000)]  # pipelined
            producer.flush()  # every future is done

    `send` queues a message into the next frame, sent once it holds `batch_size` messages (or on
    `publish`, `publish_batch`, `flush`); confirms are read while `max_in_flight` frames await
    theirs, and by `flush`. Use it from one thread at a time.

    With `reader_thread=False` the socket is read by the publishing thread, not by websockets' reader
    thread: a confirm reaches `publish` without a hop between threads, and pings are answered only
    while a call waits for confirms (DirectConnection); a connection the server dropped while the
    producer was idle is reopened by the next call, which sends its unconfirmed frames again.
    """

    def __init__(self, url: str, token: str | None, exchange: str, *, batch_size: int = 100,
                 max_in_flight: int = 10, idempotent: bool = False, retry_for: float = 60.0,
                 reader_thread: bool = True) -> None:
        super().__init__(url, token, exchange, batch_size=batch_size, max_in_flight=max_in_flight,
                         idempotent=idempotent, retry_for=retry_for)
        self.reader_thread = reader_thread
        self._ws: SyncConnection | DirectConnection | None = None
        self._open_frame: _Frame | None = None  # single sends not yet sent
        self._in_flight: deque[_Frame] = deque()
        self._failure: BaseException | None = None

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
        """Open the stream (raises when it cannot be opened within retry_for, or is refused)."""
        self._ws = self._open()

    def publish(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
                headers: Mapping[str, str] | None = None, tag: str | None = None,
                idempotency_key: str | None = None, ttl_ms: int | None = None) -> PublishResult:
        """Publish one message (with what `send` queued before it) and wait for its confirm."""
        return self.send(body, json=json, routing_key=routing_key, headers=headers, tag=tag,
                         idempotency_key=idempotency_key, ttl_ms=ttl_ms).result()

    def send(self, body: str | bytes | None = None, *, json: Any = NO_JSON, routing_key: str = "",
             headers: Mapping[str, str] | None = None, tag: str | None = None,
             idempotency_key: str | None = None, ttl_ms: int | None = None) -> concurrent.futures.Future[PublishResult]:
        """Queue one message into the next frame; returns the future of its confirm (its `result()`
        sends what is queued and reads confirms until it has its own)."""
        self._check()
        message = self._keyed(_one_message(body, json, routing_key, headers, tag, idempotency_key, ttl_ms))
        if self._open_frame is None:
            self._open_frame = _Frame([], [], None)
        frame = self._open_frame
        assert isinstance(frame.messages, list) and frame.futures is not None
        future = _Confirm(self)
        frame.messages.append(message)
        frame.futures.append(future)
        if len(frame.messages) >= self.batch_size:
            self._send_open_frame()
        return future

    def publish_batch(self, messages: Iterable[MessageLike], *, routing_key: str = "",
                      mandatory: bool = False) -> Published:
        """Publish one atomic batch (one frame; binary when no message needs JSON) and wait for its confirm."""
        self._check()
        frame = _batch_frame(messages, routing_key, mandatory, self.idempotent, self._keyed)
        frame.batch = concurrent.futures.Future()
        self._send_open_frame()  # keep the order of sends
        self._push(frame)
        while not frame.batch.done():
            self._read_one()
        return frame.batch.result()  # type: ignore[no-any-return]

    def flush(self) -> None:
        """Send what is queued and wait until everything sent so far is confirmed."""
        self._check()
        self._send_open_frame()
        while self._in_flight:
            self._read_one()

    def close(self) -> None:
        """Close the stream; publishes not yet confirmed fail with ConnectionFailed."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close()
            self._ws = None
        self._fail(self._failure or ConnectionFailed("the producer was closed"))

    # ------------------------------------------------------------------ the connection

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._ws is None:
            raise ConnectionFailed("the producer is not started (use `with` or start())")

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        for frame in (*self._in_flight, *([self._open_frame] if self._open_frame else [])):
            _reject(frame, error)
        self._in_flight.clear()
        self._open_frame = None

    def _open(self) -> SyncConnection | DirectConnection:
        backoff = Backoff(self.retry_for)
        while True:
            try:
                return open_sync_stream(self._url, self._token, self.reader_thread)
            except Lost as exc:
                time.sleep(backoff.next_delay(exc))

    def _settle_until(self, future: concurrent.futures.Future[Any]) -> None:
        self._send_open_frame()
        while not future.done() and self._ws is not None:
            self._read_one()

    def _send_open_frame(self) -> None:
        frame, self._open_frame = self._open_frame, None
        if frame is not None:
            self._push(frame)

    def _push(self, frame: _Frame) -> None:
        while len(self._in_flight) >= self.max_in_flight:
            self._read_one()
        self._number(frame)
        self._in_flight.append(frame)
        assert self._ws is not None
        try:
            self._ws.send(frame.payload)
        except ConnectionClosed:
            pass  # the next read notices and reconnects

    def _read_one(self) -> None:
        """Read one confirm and settle its frame; reconnect (and send again what is unconfirmed)
        when the connection was lost."""
        assert self._ws is not None
        try:
            raw = self._ws.recv()
        except ConnectionClosed as exc:
            error = closed_error(exc)
            if not isinstance(error, Lost):
                self._fail(error)
                raise error from exc
            self._reconnect()
            return
        answer = orjson.loads(raw)
        seq = answer.get("seq")
        if answer.get("type") not in ("confirm", "error") or seq is None:
            error = frame_error(answer)
        elif not self._in_flight or self._in_flight[0].seq != seq:
            error = ConnectionFailed(f"confirm for seq {seq} out of order")
        else:
            _settle(self._in_flight.popleft(), answer)
            return
        self._fail(error)
        raise error

    def _reconnect(self) -> None:
        self.reconnects += 1
        with contextlib.suppress(Exception):
            assert self._ws is not None
            self._ws.close()
        self._ws = self._open()
        self._binary_seq = 0
        resend = list(self._in_flight)  # unconfirmed frames go out again, first and in order
        self._in_flight.clear()
        for frame in resend:
            self._push(frame)
