"""Consuming a group over its WebSocket stream, with credit refill, batched acks and reconnects.

    async with client.consume("orders", "billing", credit=1000) as stream:
        async for message in stream:
            handle(message)  # acked once the loop asks for the next one (auto_ack)

- Credit: the consumer grants `credit` messages on connect and grants again, in one frame, each time
  half of it has been handed to the loop: at most `credit` messages wait in the local buffer.
- Acks (auto_ack): a message is done when the loop asks for the next one. Acks are per offset (safe
  when several consumers share the group) and sent in batches: with each credit refill, every 100 ms
  while messages flow, and before waiting for more. If the loop body raises, the `async with` block
  does not ack the message it was on; closing hands unprocessed messages back at once.
- Manual acks (auto_ack=False): `ack`, `ack_up_to` (cumulative: only for a group with one consumer)
  and `nack`.
- Batches: `next_batch` (and iterating `batches()`) hands over every message buffered so far, one
  list per step, up to `max_messages`: no per-message step in the consumer. With auto_ack a batch
  is done when the loop asks for the next batch or message, as a message is.
- Messages arrive as binary batches (the stream's `format=binary`): no JSON or base64 to decode.
- Reconnects: a lost connection (server restart, network) is reopened with exponential backoff for
  up to `retry_for` seconds, under the same consumer id with `resume=true`: the messages that were in
  flight to this consumer are redelivered at once, the buffer is dropped (its messages come again)
  and pending acks are sent first. Delivery is at-least-once: nothing is lost, a message may repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from operator import itemgetter
from typing import Any, TypeVar

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection as SyncConnection

from chunkmq.client._batch import decode
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
from chunkmq.client.models import Message

ACK_EVERY_S = 0.1
T = TypeVar("T")
_OFFSET = itemgetter(1)  # Message.offset, as a C getter for a batch's offsets


def default_consumer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9._:-]", "-", socket.gethostname())[:60] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


class _Stream:
    """What the async and the blocking consumer hold alike: the group's stream URL, the credit, and
    the messages between the socket and the loop."""

    def __init__(self, url: str, token: str | None, queue: str, group: str, *, consumer: str | None = None,
                 credit: int = 1000, auto_ack: bool = True, retry_for: float = 60.0) -> None:
        if not 1 <= credit <= 1_000_000:
            raise ValueError("credit must be from 1 to 1000000")
        self.queue = queue
        self.group = group
        self.consumer = consumer or default_consumer_id()
        self.credit = credit
        self.auto_ack = auto_ack
        self.retry_for = retry_for
        self.reconnects = 0
        self._token = token
        self._url = ws_url(url, f"/api/v1/queues/{queue}/groups/{group}/stream",
                           {"consumer": self.consumer, "resume": "true", "format": "binary"})
        self._buffer: deque[Message] = deque()
        self._current: Message | None = None  # handed to the loop, acked when it asks for the next
        self._current_batch: list[Message] = []  # the same for a batch (next_batch)
        self._acks: list[int] = []  # done, not yet sent
        self._taken = 0  # handed to the loop since the last credit frame
        self._refill_at = max(1, credit // 2)
        self._flushed = time.monotonic()
        self._closed = False

    def _move_on(self) -> None:
        """The loop asks for another message or batch (or stops): the one it had is done."""
        if self._current is not None:
            self._acks.append(self._current.offset)
            self._current = None
        if self._current_batch:
            self._acks.extend(map(_OFFSET, self._current_batch))
            self._current_batch = []

    def _drop_current(self) -> None:
        """The loop body failed on what it had: handed back, not acked."""
        self._current = None
        self._current_batch = []

    def _due(self) -> bool:
        """Whether acks or credit are due to be sent now."""
        return self._taken >= self._refill_at or bool(self._acks and time.monotonic() - self._flushed > ACK_EVERY_S)

    def _take(self) -> tuple[Message, bool]:
        """The next buffered message, and whether acks or credit are due to be sent now."""
        message = self._buffer.popleft()
        self._taken += 1
        if self.auto_ack:
            self._current = message
        return message, self._due()

    def _take_batch(self, max_messages: int | None) -> tuple[list[Message], bool]:
        """Every buffered message (at most `max_messages`), and whether acks or credit are due."""
        buffer = self._buffer
        if max_messages is None or max_messages >= len(buffer):
            batch = list(buffer)
            buffer.clear()
        else:
            batch = [buffer.popleft() for _ in range(max_messages)]
        self._taken += len(batch)
        if self.auto_ack:
            self._current_batch = batch
        return batch, self._due()

    @staticmethod
    def _check_max(max_messages: int | None) -> None:
        if max_messages is not None and max_messages < 1:
            raise ValueError("max_messages must be at least 1")

    def _closing(self) -> bool:
        """Mark the consumer closed, the current message done; False when it already was closed."""
        if self._closed:
            return False
        self._move_on()
        self._closed = True
        return True


def _offsets(messages: Iterable[Message | int]) -> list[int]:
    return [m if isinstance(m, int) else m.offset for m in messages]


class AsyncConsumer(_Stream):
    """An async iterator of the messages of one consumer group (see the module docstring)."""

    _ws: ClientConnection | None = None

    async def __aenter__(self) -> AsyncConsumer:
        await self._connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self._drop_current()  # the loop body failed on it: it is handed back, not acked
        await self.close()

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Message:
        message = await self.next()
        if message is None:
            raise StopAsyncIteration
        return message

    async def _wait(self, timeout: float | None) -> bool:
        """Move on (acking the message before with auto_ack), then wait until a message is buffered:
        False when none came within `timeout` seconds (None: wait for one) or the consumer closed."""
        if self._ws is None and not self._closed:
            raise RuntimeError("the consumer is not open: iterate it inside its `with` (or `async with`) block")
        self._move_on()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._closed:
                return False
            await self._flush()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await self._receive(left)
        return True

    async def next(self, timeout: float | None = None) -> Message | None:
        """The next message, or None when none came within `timeout` seconds (None: wait for one)
        or the consumer is closed. Moving on acks the message before (auto_ack), as the loop does."""
        if not await self._wait(timeout):
            return None
        message, due = self._take()
        if due:
            await self._flush()
        return message

    async def next_batch(self, timeout: float | None = None, max_messages: int | None = None) -> list[Message]:
        """Every message buffered so far (at most `max_messages`), waiting up to `timeout` seconds
        (None: for as long as it takes) for at least one; [] when none came or the consumer is
        closed. With auto_ack the batch is done when the loop asks for the next one."""
        self._check_max(max_messages)
        if not await self._wait(timeout):
            return []
        batch, due = self._take_batch(max_messages)
        if due:
            await self._flush()
        return batch

    async def batches(self, max_messages: int | None = None) -> AsyncIterator[list[Message]]:
        """`async for batch in stream.batches():` next_batch until the consumer is closed."""
        while batch := await self.next_batch(max_messages=max_messages):
            yield batch

    # ------------------------------------------------------------------ manual acknowledgements

    async def ack(self, messages: Iterable[Message | int]) -> None:
        """Acknowledge messages (or offsets); sent now, or after a reconnect if the socket is down."""
        self._acks.extend(_offsets(messages))
        await self._flush()

    async def ack_up_to(self, offset: int) -> None:
        """Cumulative ack of every offset below `offset`, for groups with this one consumer only."""
        await self._send({"type": "ack", "up_to": offset})

    async def nack(self, messages: Iterable[Message | int], delay_ms: int = 0, *, requeue: bool = True) -> None:
        """Hand messages back for redelivery after delay_ms (dead-lettered past the queue's
        max_deliveries); `requeue=False` rejects them at once (to the dead-letter exchange, or dropped)."""
        await self._send({"type": "nack", "offsets": _offsets(messages), "delay_ms": delay_ms, "requeue": requeue})

    async def close(self, requeue: bool = True) -> None:
        """Send pending acks, ask the server to hand unprocessed messages back (requeue), and close."""
        if not self._closing():
            return
        ws = self._ws
        if ws is None:
            return
        with contextlib.suppress(ConnectionClosed, OSError):
            await self._flush(credit=False)
            await ws.send(orjson.dumps({"type": "close", "requeue": requeue}))
            await asyncio.wait_for(ws.wait_closed(), 5)
        with contextlib.suppress(Exception):
            await ws.close()

    # ------------------------------------------------------------------ the socket

    async def _send(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None
        try:
            await self._ws.send(orjson.dumps(frame))
        except ConnectionClosed:
            pass  # the next receive notices and reconnects

    async def _flush(self, credit: bool = True) -> None:
        """Send the acks collected so far and, when half the credit is used up, new credit."""
        assert self._ws is not None
        self._flushed = time.monotonic()
        try:
            if self._acks:
                await self._ws.send(orjson.dumps({"type": "ack", "offsets": self._acks}))
                self._acks = []
            if credit and self._taken >= self._refill_at:
                await self._ws.send(b'{"type":"credit","n":%d}' % self._taken)
                self._taken = 0
        except ConnectionClosed:
            pass  # kept for the next connection

    async def _receive(self, timeout: float | None = None) -> None:
        assert self._ws is not None
        try:
            if timeout is None:
                raw = await self._ws.recv()
            else:  # recv may be cancelled: a frame it did not return stays for the next one
                raw = await asyncio.wait_for(self._ws.recv(), timeout)
        except TimeoutError:
            return
        except ConnectionClosed as exc:
            error = closed_error(exc)
            if not isinstance(error, Lost):
                raise error from exc
            await self._reconnect(error)
            return
        if isinstance(raw, bytes):  # messages: a binary batch (format=binary); other frames are JSON text
            self._buffer.extend(decode(raw, self.queue))
            return
        frame = orjson.loads(raw)
        if frame.get("type") == "error":
            self._closed = True
            with contextlib.suppress(Exception):
                await self._ws.close()
            raise frame_error(frame)

    async def _connect(self) -> None:
        backoff = Backoff(self.retry_for)
        while True:
            try:
                ws = await open_stream(self._url, self._token)
                break
            except Lost as exc:
                await backoff.wait(exc)
        self._ws = ws
        # Acks first, so what was done is not redelivered by resume; then a whole credit (the buffer is empty).
        self._taken = self.credit
        await self._flush()

    async def _reconnect(self, cause: Exception) -> None:
        self.reconnects += 1
        self._buffer.clear()  # in flight at the server: redelivered to us after the resume
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        await self._connect()


class Consumer(_Stream):
    """The blocking twin of AsyncConsumer (`Client.consume`): the same credit, acks and reconnects,
    on websockets' blocking client, so taking a message never waits for another thread.

        with client.consume("orders", "billing") as stream:
            for message in stream:
                handle(message)  # acked once the loop asks for the next one (auto_ack)

    Use it from one thread at a time. A `break` out of the loop acks the message it was on; an
    exception in the loop body (Ctrl-C included) hands that message back, as in the async consumer.

    With `reader_thread=False` the socket is read by the thread that asks for messages, not by
    websockets' reader thread: a message reaches the loop without a hop between threads (the lowest
    latency), and pings are answered only while the loop waits for messages (DirectConnection).
    """

    _ws: SyncConnection | DirectConnection | None = None

    def __init__(self, url: str, token: str | None, queue: str, group: str, *, consumer: str | None = None,
                 credit: int = 1000, auto_ack: bool = True, retry_for: float = 60.0,
                 reader_thread: bool = True) -> None:
        super().__init__(url, token, queue, group, consumer=consumer, credit=credit, auto_ack=auto_ack,
                         retry_for=retry_for)
        self.reader_thread = reader_thread

    def __enter__(self) -> Consumer:
        self._connect()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self._drop_current()  # the loop body failed on it: it is handed back, not acked
        self.close()

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        message = self.next()
        if message is None:
            raise StopIteration
        return message

    def _wait(self, timeout: float | None) -> bool:
        """Move on (acking the message before with auto_ack), then wait until a message is buffered:
        False when none came within `timeout` seconds (None: wait for one) or the consumer closed."""
        if self._ws is None and not self._closed:
            raise RuntimeError("the consumer is not open: iterate it inside its `with` block")
        self._move_on()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._closed:
                return False
            self._flush()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._receive(left)
        return True

    def next(self, timeout: float | None = None) -> Message | None:
        """The next message, or None when none came within `timeout` seconds (None: wait for one)
        or the consumer is closed. Moving on acks the message before (auto_ack), as the loop does."""
        if not self._wait(timeout):
            return None
        message, due = self._take()
        if due:
            self._flush()
        return message

    def next_batch(self, timeout: float | None = None, max_messages: int | None = None) -> list[Message]:
        """Every message buffered so far (at most `max_messages`): see AsyncConsumer.next_batch."""
        self._check_max(max_messages)
        if not self._wait(timeout):
            return []
        batch, due = self._take_batch(max_messages)
        if due:
            self._flush()
        return batch

    def batches(self, max_messages: int | None = None) -> Iterator[list[Message]]:
        """`for batch in stream.batches():` next_batch until the consumer is closed."""
        while batch := self.next_batch(max_messages=max_messages):
            yield batch

    def ack(self, messages: Iterable[Message | int]) -> None:
        """Acknowledge messages (or offsets): see AsyncConsumer.ack."""
        self._acks.extend(_offsets(messages))
        self._flush()

    def ack_up_to(self, offset: int) -> None:
        """Cumulative ack of every offset below `offset`, for groups with this one consumer only."""
        self._send({"type": "ack", "up_to": offset})

    def nack(self, messages: Iterable[Message | int], delay_ms: int = 0, *, requeue: bool = True) -> None:
        """Hand messages back: see AsyncConsumer.nack."""
        self._send({"type": "nack", "offsets": _offsets(messages), "delay_ms": delay_ms, "requeue": requeue})

    def close(self, requeue: bool = True) -> None:
        """Send pending acks, ask the server to hand unprocessed messages back (requeue), and close."""
        if not self._closing():
            return
        ws = self._ws
        if ws is None:
            return
        with contextlib.suppress(ConnectionClosed, OSError, TimeoutError):
            self._flush(credit=False)
            ws.send(orjson.dumps({"type": "close", "requeue": requeue}))
            deadline = time.monotonic() + 5
            while True:  # until the server closes: what it still sends is handed back with the rest
                ws.recv(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(Exception):
            ws.close()

    def _send(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None
        with contextlib.suppress(ConnectionClosed):  # the next receive notices and reconnects
            self._ws.send(orjson.dumps(frame))

    def _flush(self, credit: bool = True) -> None:
        assert self._ws is not None
        self._flushed = time.monotonic()
        try:
            if self._acks:
                self._ws.send(orjson.dumps({"type": "ack", "offsets": self._acks}))
                self._acks = []
            if credit and self._taken >= self._refill_at:
                self._ws.send(b'{"type":"credit","n":%d}' % self._taken)
                self._taken = 0
        except ConnectionClosed:
            pass  # kept for the next connection

    def _receive(self, timeout: float | None) -> None:
        assert self._ws is not None
        try:
            raw = self._ws.recv(timeout=timeout)
        except TimeoutError:
            return
        except ConnectionClosed as exc:
            error = closed_error(exc)
            if not isinstance(error, Lost):
                raise error from exc
            self._reconnect()
            return
        if isinstance(raw, bytes):  # messages: a binary batch (format=binary); other frames are JSON text
            self._buffer.extend(decode(raw, self.queue))
            return
        frame = orjson.loads(raw)
        if frame.get("type") == "error":
            self._closed = True
            with contextlib.suppress(Exception):
                self._ws.close()
            raise frame_error(frame)

    def _connect(self) -> None:
        backoff = Backoff(self.retry_for)
        while True:
            try:
                self._ws = open_sync_stream(self._url, self._token, self.reader_thread)
                break
            except Lost as exc:
                time.sleep(backoff.next_delay(exc))
        # Acks first, so what was done is not redelivered by resume; then a whole credit (the buffer is empty).
        self._taken = self.credit
        self._flush()

    def _reconnect(self) -> None:
        self.reconnects += 1
        self._buffer.clear()  # in flight at the server: redelivered to us after the resume
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close()
        self._connect()
