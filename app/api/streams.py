"""WebSocket streams: consume a group and publish to an exchange over one long-lived connection.

Frame shapes are API.md "WebSocket streams" (the design follows Pulsar's WebSocket API). Every frame
is one JSON object; the client may send text or binary frames, the server sends binary frames of
UTF-8 JSON (the delivered messages are joined as stored, never re-encoded). With `format=binary` a
consume stream sends its messages as binary frames that each hold one binary batch (the pull
answer's layout, docs/api.md "Binary batches"), and every other frame as a text frame of JSON: the
frame's kind tells the client which it has.

Consume: /api/v1/queues/{q}/groups/{g}/stream?consumer=c1[&resume=true][&format=binary]
    client: {"type": "credit", "n": 500}             the server may send 500 more messages
            {"type": "ack", "offsets": [..]} | {"type": "ack", "up_to": n}   optional "seq": 7
            {"type": "nack", "offsets": [..], "delay_ms": 0}
            {"type": "close", "requeue": true}       in-flight messages are redelivered at once
            {"type": "ping"}                         answered with {"type": "pong"}
    server: {"type": "messages", "messages": [message, ...]} | {"type": "error", "error": {..}}
            {"type": "acked", "seq": 7, "ack_floor": n}   for an ack with a seq, once it is durable
  The group is created at `earliest` when absent (as a pull does). Credit is a count of permits:
  the server never sends more messages than the credit granted so far on this connection. Without
  `consumer` the server picks a unique id. `resume=true` makes the in-flight messages of this consumer
  id from an earlier (dead) connection ready again at once, instead of after their ack timeout.

Publish: /api/v1/exchanges/{name}/stream[?format=binary[&mandatory=true]]
    client: {"type": "publish", "seq": 7, "messages": [...], "mandatory": false} | {"type": "ping"}
            with format=binary, a binary frame is one binary batch to publish: its seq is its number
            among the stream's binary frames (1, 2, ...), mandatory the query parameter
    server: {"type": "confirm", "seq": 7, "results": [...], "durability": "interval"}
            {"type": "error", "seq": 7, "error": {..}}
  Publishes are pipelined: each frame is stored in arrival order, as one atomic batch, and confirmed
  after the durability barrier; confirms and errors come back in the order of the frames.

Errors. A bad frame (JSON that is not an object, an unknown type or field, a bad seq: `_frame`) gets an
error frame and the stream goes on. These end the stream:
    1000  the client's close frame was handled
    1007  a frame that is not JSON
    1009  a frame over the size limit (1 MiB on the consume stream, max_batch_bytes on publish)
    4000 + HTTP status (4400, 4401, 4403, 4404, 4409)  the stream cannot open or cannot go on:
          an error frame with the API.md error comes first (bad name, no/invalid token, not
          permitted, queue/group/exchange not found or deleted, queue not visible to consumers).
Heartbeats: uvicorn pings every CHUNKMQ_WS_PING_INTERVAL s (20) and drops a peer that does not answer within
CHUNKMQ_WS_PING_TIMEOUT s (20), even one whose TCP window is full (app/http/websocket.py); the
application-level ping frame is there for clients that cannot send protocol pings (browsers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket

from chunkmq.api import eager
from chunkmq.api.errors import api_error, error_frame, refuse, send_frame
from chunkmq.api.publish import binary_mandatory, publish_args
from chunkmq.broker.broker import Broker, PublishOutcome
from chunkmq.broker.errors import BrokerError, InvalidInput, NotFound
from chunkmq.broker.fields import boolean, non_negative_int, reject_unknown
from chunkmq.broker.group import Group, monotonic_ms
from chunkmq.broker.names import check_name, exchange_from_path
from chunkmq.broker.queue import Queue
from chunkmq.wire import codes

log = logging.getLogger("chunkmq.api.streams")

router = APIRouter(tags=["streams"])

CLOSE_NORMAL = 1000
CLOSE_NOT_JSON = 1007
CLOSE_TOO_LARGE = 1009
MAX_CONTROL_FRAME = 1024 * 1024  # credit/ack/nack frames: 100,000 offsets fit
MAX_FRAME_MESSAGES = 1000  # one messages frame holds at most this many (more credit: more frames)
MAX_CREDIT = 1_000_000  # per credit frame
MAX_PUBLISH_IN_FLIGHT = 1024  # publish frames awaiting their confirm; the reader stops beyond it
_PONG = b'{"type":"pong"}'
# The scope key of a stream's frame hook: `hook(data, text) -> bool`, called by the server's WebSocket
# protocol (app/http/websocket.py) with each whole frame from the client while nothing is queued ahead of it; True
# when the stream handled the frame there, False to have it queued for `receive` as usual.
FRAME_HOOK = "chunkmq.frame_hook"
# The scope key of the protocol's frame writer: `write(data, text) -> bool` writes a frame at once, in
# the caller's callback, or returns False (not accepted yet, writing paused, closing): then `send` it.
FRAME_WRITE = "chunkmq.frame_write"
_CLOSE = b""  # marker: the client asked to close
_OVER = object()  # marker: the stream is over (a frame of JSON null is a frame, not the end)

# The frames a client may send, with their fields besides "type": one strict check for both streams,
# as for the REST bodies (the broker checks the values of ack and nack as it does for their routes).
CONSUME_FRAMES: dict[str, tuple[str, ...]] = {
    "credit": ("n",), "ack": ("offsets", "up_to", "seq"), "nack": ("offsets", "delay_ms", "requeue"),
    "close": ("requeue",), "ping": (),
}
PUBLISH_FRAMES: dict[str, tuple[str, ...]] = {"publish": ("seq", "messages", "mandatory"), "ping": ()}


class _Gone(Exception):
    """The peer went away while a frame was being sent."""


async def _receive(websocket: WebSocket, limit: int, batches: bool = False) -> Any:
    """The next frame parsed (any JSON value: `_frame` checks it), or _OVER once the stream is over
    (closed by the peer, or by us for a frame that is too large or not JSON). With `batches`, a binary
    frame is returned as its bytes."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return _OVER
    data = message.get("bytes")
    if data is None:
        data = message.get("text") or ""
    if len(data) > limit:
        await websocket.close(CLOSE_TOO_LARGE, f"frames are limited to {limit} bytes")
        return _OVER
    if batches and isinstance(data, bytes):
        return data
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        await websocket.close(CLOSE_NOT_JSON, "a frame must be a JSON object")
        return _OVER


def _binary_format(websocket: WebSocket) -> bool:
    """The stream's `format` query parameter: json (default) or binary."""
    value = websocket.query_params.get("format", "json")
    if value not in ("json", "binary"):
        raise InvalidInput("format must be json or binary", code=codes.INVALID_REQUEST)
    return value == "binary"


def _frame(frame: Any, kinds: dict[str, tuple[str, ...]]) -> tuple[str, dict[str, Any]]:
    """A client frame's type and its other fields, checked: a JSON object, a known type, no unknown
    field, and a `seq`, where the type has one, that is a non-negative integer."""
    if type(frame) is not dict:
        raise InvalidInput(f'a frame must be a JSON object with a "type", not {type(frame).__name__}')
    kind = frame.get("type")
    if kind not in kinds:
        raise InvalidInput(f"unknown frame type {kind!r}: expected {', '.join(kinds)}")
    fields = {k: v for k, v in frame.items() if k != "type"}
    reject_unknown(fields, kinds[kind], f"{kind} frame")
    if "seq" in fields:
        non_negative_int(fields, "seq")
    return kind, fields


def _flag(websocket: WebSocket, name: str) -> bool:
    """A true/false query parameter (absent: false)."""
    value = websocket.query_params.get(name, "false")
    if value not in ("true", "false"):
        raise InvalidInput(f"{name} must be true or false", code=codes.INVALID_REQUEST)
    return value == "true"


# ---------------------------------------------------------------------------------------- consume


@router.websocket("/api/v1/queues/{queue}/groups/{group}/stream")
async def consume_stream(websocket: WebSocket, queue: str, group: str) -> None:
    await websocket.accept()
    broker: Broker = websocket.app.state.broker
    params = websocket.query_params
    binary = False
    try:
        binary = _binary_format(websocket)
        consumer = check_name(params.get("consumer") or f"ws-{secrets.token_hex(6)}", "consumer id")
        resume = _flag(websocket, "resume")
        q, g = await broker.consumer_group(queue, group)
    except Exception as exc:
        await refuse(websocket, api_error(exc), text=binary)
        return
    if resume and g.release_consumer(consumer, monotonic_ms()):
        q.notify()
    await _ConsumeStream(websocket, broker, q, g, consumer, binary).run()


class _ConsumeStream:
    """Two tasks over one socket: this one reads client frames (credit, acks, nacks, close); the
    sender pushes messages whenever there is credit and something to deliver. With `binary`, messages
    go as binary batches in binary frames and every other frame as text."""

    def __init__(self, websocket: WebSocket, broker: Broker, queue: Queue, group: Group, consumer: str,
                 binary: bool = False) -> None:
        self.ws = websocket
        self.broker = broker
        self.queue = queue
        self.group = group
        self.consumer = consumer
        self.binary = binary
        self.credit = 0
        self.granted = asyncio.Event()
        self.sending = asyncio.Lock()  # error and pong frames from the reader vs. the sender's frames
        self.requeue = False
        self.parked = False  # the sender waits for a publish: `_push` may deliver in its stead
        self.wakeup = asyncio.Event()  # set by `_push` for what it leaves to the parked sender
        self.reader_idle = False  # the reader waits for a frame, with none in hand
        self.confirming: set[asyncio.Task[None]] = set()  # ack confirms, and pushes that wait to write

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        stop_pushing = self.queue.push_to(self._push)
        detach = self.broker.attach_consumer(self.queue, self.group, self.consumer)  # single active consumer
        self.ws.scope[FRAME_HOOK] = self._hook
        try:
            asked_to_close = await self._read_loop()
        finally:
            self.ws.scope.pop(FRAME_HOOK, None)
            stop_pushing()
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            for task in list(self.confirming):
                with contextlib.suppress(BaseException):
                    await task
            if self.requeue and self.group.release_consumer(self.consumer, monotonic_ms()):
                self.queue.notify()
            detach()  # after the requeue: a next active consumer gets its messages first either way
        if asked_to_close:  # after the requeue: a consumer that sees the close can count on it
            with contextlib.suppress(Exception):
                await self.ws.close(CLOSE_NORMAL)

    async def _send(self, data: bytes, batch: bool = False) -> None:
        """Send one frame: `data` is JSON, or with `batch` a binary batch of messages."""
        async with self.sending:
            try:  # awaiting the write is the back-pressure on slow peers
                await send_frame(self.ws, data, self.binary and not batch)
            except (OSError, RuntimeError):
                raise _Gone from None

    async def _send_loop(self) -> None:
        """Deliver while there is credit. An error here (a deleted queue, a corrupt chunk) ends the
        stream: it is logged, sent as an error frame, and the socket closed with 4000 + its status,
        so the client never waits on a sender that is gone."""
        try:
            await self._deliver_loop()
        except _Gone:
            return  # the socket went away mid-send: the reader sees the disconnect
        except Exception as exc:
            error = api_error(exc)
            log.warning("consume stream %s/%s (consumer %s) ended: %s %s",
                        self.queue.name, self.group.name, self.consumer, error.code, error.message)
            async with self.sending:
                await refuse(self.ws, error, text=self.binary)

    async def _deliver_loop(self) -> None:
        broker, queue, group, consumer = self.broker, self.queue, self.group, self.consumer
        deliver, binary = broker.deliver, self.binary
        while True:
            if self.credit <= 0:
                self.granted.clear()
                await self.granted.wait()
                continue
            if not broker.is_current(queue):
                raise NotFound(f"queue {queue.name!r} was deleted", code=codes.QUEUE_NOT_FOUND)
            if group.closed:
                raise NotFound(f"group {group.name!r} on queue {queue.name!r} was deleted", code=codes.GROUP_NOT_FOUND)
            if broker.cold:  # chunks in the tier's bucket only: fetched off the loop, before the look
                await broker.warm(queue, group.next_offset, min(self.credit, MAX_FRAME_MESSAGES))
            # Cleared before looking: every notify after the look (a publish, due redeliveries, a
            # deleted group) calls `_push`, which delivers or sets it again.
            self.wakeup.clear()
            parts = deliver(queue, group, consumer, min(self.credit, MAX_FRAME_MESSAGES), binary=binary)
            if not parts:
                self.parked = True
                try:
                    await self.wakeup.wait()
                finally:
                    self.parked = False
                continue
            await self._send(*self._messages(parts))

    def _messages(self, parts: list[bytes]) -> tuple[bytes, bool]:
        """The frame of what `deliver` returned, and whether it is a batch; its credit is spent."""
        if self.binary:  # one batch: its first u32 is the count
            self.credit -= int.from_bytes(parts[0][:4], "little")
            return parts[0], True
        self.credit -= len(parts)
        return b'{"type":"messages","messages":[' + b",".join(parts) + b"]}", False

    def _push(self) -> None:
        """Called by the queue's notify (a publish, in its own call): while the sender waits for
        messages, deliver and write them now, ahead of the publisher's confirm. Whatever is not
        plain (no credit, a frame being written, a deleted queue or group, an error, a full frame
        with more to come) is left to the sender, woken for it; what it delivers, or finds nothing
        to deliver, costs the sender no wake-up and no second look. A sender that is not parked
        looks again once it is done with what it does."""
        if not self.parked:
            return
        if self.credit <= 0 or self.sending.locked() or self.group.closed or not self.broker.is_current(self.queue):
            self.wakeup.set()
            return
        try:
            parts = self.broker.deliver(self.queue, self.group, self.consumer, min(self.credit, MAX_FRAME_MESSAGES),
                                        binary=self.binary)
        except Exception:
            self.wakeup.set()  # the sender meets it too, and ends the stream with it
            return
        if not parts:
            return
        credit = self.credit
        self._send_now(*self._messages(parts))
        if credit - self.credit >= MAX_FRAME_MESSAGES:
            self.wakeup.set()

    def _send_now(self, data: bytes, batch: bool = False) -> None:
        """`_send` from a callback: written at once unless the socket is paused (app/api/eager.py),
        else by a task; frames sent after it wait for it (`sending`), so they keep their order."""
        if not self.sending.locked() and _write_now(self.ws, data, self.binary and not batch):
            return  # nothing on its way ahead of it: no frame to keep the order of
        try:
            finished, rest = eager.start(self._send(data, batch))
        except _Gone:
            return  # the reader sees the disconnect
        if not finished:
            task = asyncio.ensure_future(rest)
            self.confirming.add(task)
            task.add_done_callback(self._pushed)

    def _hook(self, data: bytes, text: bool) -> bool:
        """FRAME_HOOK: a credit, ack, nack or ping frame applied in the protocol's callback while the
        reader waits (a consumer acks every batch: no task wake for each), and its answer written
        there. A close frame, a frame too large or not JSON, or one while a frame is being written,
        goes the reader's way."""
        if not self.reader_idle or self.sending.locked() or len(data) > MAX_CONTROL_FRAME:
            return False
        try:
            frame = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if type(frame) is dict and frame.get("type") == "close":
            return False
        try:
            answer = self._handle(frame)
        except Exception as exc:
            answer = error_frame(api_error(exc))
        if answer is not None:
            self._send_now(answer)
        return True

    def _pushed(self, task: asyncio.Task[None]) -> None:
        self.confirming.discard(task)
        if not task.cancelled():
            task.exception()  # _Gone: the reader sees the disconnect

    def _confirm_ack(self, seq: Any) -> None:
        """Answer an ack frame that carries a `seq` once the ack survives a crash (fsync=always; at
        once otherwise): {"type": "acked", "seq": 7, "ack_floor": n}. Confirms keep the frames' order."""
        frame = orjson.dumps({"type": "acked", "seq": seq, "ack_floor": self.group.ack_floor})  # as of this ack

        async def confirm() -> None:
            await self.broker.acks_durable()
            with contextlib.suppress(OSError, RuntimeError):
                await self._send(frame)

        task = asyncio.create_task(confirm())
        self.confirming.add(task)
        task.add_done_callback(self.confirming.discard)

    async def _read_loop(self) -> bool:
        """Handle client frames until the stream ends; True when the client asked to close."""
        while True:
            self.reader_idle = True
            try:
                frame = await _receive(self.ws, MAX_CONTROL_FRAME)
            except (OSError, RuntimeError):
                return False
            finally:
                self.reader_idle = False
            if frame is _OVER:
                return False
            try:
                answer = self._handle(frame)
            except Exception as exc:
                answer = error_frame(api_error(exc))
            if answer is _CLOSE:
                return True
            if answer is not None:
                try:
                    await self._send(answer)
                except _Gone:
                    return False

    def _handle(self, frame: Any) -> bytes | None:
        """Apply one client frame; returns the frame to answer with, if any (_CLOSE: close the stream)."""
        kind, fields = _frame(frame, CONSUME_FRAMES)
        if kind == "ack":
            seq = fields.pop("seq", None)
            self.broker.ack(self.queue.name, self.group.name, fields)
            if seq is not None:
                self._confirm_ack(seq)
        elif kind == "credit":
            n = fields.get("n")
            if type(n) is not int or not 1 <= n <= MAX_CREDIT:
                raise InvalidInput(f"credit n must be an integer from 1 to {MAX_CREDIT}")
            self.credit += n
            self.granted.set()
        elif kind == "nack":
            self.broker.nack(self.queue.name, self.group.name, fields)
        elif kind == "close":
            self.requeue = boolean(fields, "requeue", False)
            return _CLOSE
        else:  # ping
            return _PONG
        return None


# ---------------------------------------------------------------------------------------- publish


@router.websocket("/api/v1/exchanges/{name}/stream")
async def publish_stream(websocket: WebSocket, name: str) -> None:
    await websocket.accept()
    broker: Broker = websocket.app.state.broker
    binary = False
    try:
        binary = _binary_format(websocket)
        mandatory = binary_mandatory(websocket.scope) if binary else False
        exchange = exchange_from_path(name)
        broker.exchange(exchange)
    except Exception as exc:
        await refuse(websocket, api_error(exc), text=binary)
        return
    await _PublishStream(websocket, broker, exchange, binary, mandatory).run()


_Answer = asyncio.Future[PublishOutcome] | PublishOutcome | BrokerError | bytes


class _PublishStream:
    """The reader starts one broker publish per frame, in frame order (so batches are stored in
    order); the sender awaits them in the same order and confirms each: pipelined, in order. A
    frame with nothing ahead of it is published by the server's protocol as it arrives (`_hook`), and
    confirmed there when the publish finished at once (no fsync to wait for). With `binary`, binary
    frames are binary batches (published with `mandatory`) and every frame the server sends is text."""

    def __init__(self, websocket: WebSocket, broker: Broker, exchange: str, binary: bool = False,
                 mandatory: bool = False) -> None:
        self.ws = websocket
        self.broker = broker
        self.exchange = exchange
        self.binary = binary
        self.mandatory = mandatory
        self.batches = 0  # binary frames so far: the seq of each
        self.answers: asyncio.Queue[tuple[Any, _Answer] | None] = asyncio.Queue(MAX_PUBLISH_IN_FLIGHT)
        self.sender_idle = True  # the sender waits for an answer: none of its own is on the way
        self.reader_idle = False  # the reader waits for a frame, with none in hand
        self.writing: asyncio.Future[None] | None = None  # a confirm of `_hook` that waits to be written

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop())
        self.ws.scope[FRAME_HOOK] = self._hook
        try:
            await self._read_loop()
            await self.answers.put(None)  # confirm what was published before the close, then stop
            await asyncio.wait_for(asyncio.shield(sender), 30)
        except (TimeoutError, OSError, RuntimeError):
            pass
        finally:
            self.ws.scope.pop(FRAME_HOOK, None)
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            if self.writing is not None:
                with contextlib.suppress(BaseException):
                    await self.writing
            while not self.answers.empty():  # publishes nobody will hear about: still collect them
                item = self.answers.get_nowait()
                if item is not None and isinstance(item[1], asyncio.Future):
                    with contextlib.suppress(BaseException):
                        await item[1]

    async def _read_loop(self) -> None:
        limit = self.broker.settings.max_batch_bytes
        while True:
            try:
                frame = await self._next_frame(limit)
            except (OSError, RuntimeError):
                return
            if frame is _OVER:
                return
            if self.writing is not None:  # a confirm of `_hook` comes first
                with contextlib.suppress(Exception):  # a peer gone: the next receive says so
                    await self.writing
            seq, answer = self._start(frame)
            if self.sender_idle and self.answers.empty() and not isinstance(answer, asyncio.Future):
                await send_frame(self.ws, _answer_frame(seq, answer), self.binary)  # nothing ahead of it
            else:
                await self.answers.put((seq, answer))

    async def _next_frame(self, limit: int) -> Any:
        self.reader_idle = True
        try:
            return await _receive(self.ws, limit, self.binary)
        finally:
            self.reader_idle = False

    def _hook(self, data: bytes, text: bool) -> bool:
        """FRAME_HOOK: a frame handled in the protocol's callback, when nothing is ahead of it (the
        reader waits, no answer is on its way): published there, and its confirm written there
        unless the publish waits for an fsync (then the sender confirms it). Anything else (a frame
        too large or not JSON, which end the stream) goes the reader's way."""
        if not (self.reader_idle and self.sender_idle and self.answers.empty() and self.writing is None):
            return False
        if len(data) > self.broker.settings.max_batch_bytes:
            return False
        if self.binary and not text:
            frame: Any = bytes(data)
        else:
            try:
                frame = orjson.loads(data)
            except orjson.JSONDecodeError:
                return False
        seq, answer = self._start(frame)
        if isinstance(answer, asyncio.Future):
            self.answers.put_nowait((seq, answer))
            return True
        confirm = _answer_frame(seq, answer)
        if _write_now(self.ws, confirm, self.binary):
            return True
        try:  # written at once unless the socket is paused (app/api/eager.py)
            finished, rest = eager.start(send_frame(self.ws, confirm, self.binary))
        except Exception:
            return True  # the peer is gone: the reader sees the disconnect
        if not finished:
            self.writing = asyncio.ensure_future(rest)
            self.writing.add_done_callback(self._written)
        return True

    def _written(self, task: asyncio.Future[None]) -> None:
        self.writing = None
        if not task.cancelled():
            task.exception()  # the peer is gone: the reader sees the disconnect

    def _start(self, frame: Any) -> tuple[Any, _Answer]:
        if isinstance(frame, bytes):  # a binary batch (format=binary), parsed by the broker
            self.batches += 1
            seq: Any = self.batches
            messages: Any = frame
            mandatory = self.mandatory
        else:
            seq = frame.get("seq") if type(frame) is dict else None  # echoed in the error frame, even a bad one
            try:
                kind, fields = _frame(frame, PUBLISH_FRAMES)
                if kind == "ping":
                    return seq, _PONG
                if "seq" not in fields:
                    raise InvalidInput("seq must be a non-negative integer")
                messages, mandatory = publish_args({k: v for k, v in fields.items() if k != "seq"})
            except Exception as exc:
                return seq, api_error(exc)
        # The synchronous part of the publish (validate, route, append, and the delivery to consumers
        # waiting for it) runs here, so frames are stored in the order they arrived; only one that
        # waits for an fsync needs a task.
        try:
            outcome, wake = self.broker.begin_publish(self.exchange, messages, mandatory)
        except Exception as exc:
            return seq, api_error(exc)  # logged there when it is a server error
        return seq, outcome if wake is None else asyncio.ensure_future(self.broker.durable(outcome, wake))

    async def _send_loop(self) -> None:
        while True:
            self.sender_idle = True
            item = await self.answers.get()
            self.sender_idle = False
            if item is None:
                return
            seq, answer = item
            if isinstance(answer, asyncio.Future):
                try:
                    answer = await answer
                except Exception as exc:
                    answer = api_error(exc)  # logged there when it is a server error
            await send_frame(self.ws, _answer_frame(seq, answer), self.binary)


def _write_now(websocket: WebSocket, frame: bytes, text: bool) -> bool:
    """The frame written at once by the server's protocol (FRAME_WRITE); False when it was not."""
    write = websocket.scope.get(FRAME_WRITE)
    return write is not None and bool(write(frame, text))


def _answer_frame(seq: Any, answer: PublishOutcome | BrokerError | bytes) -> bytes:
    """The frame that answers a publish frame: its confirm, its error, or a pong."""
    if isinstance(answer, bytes):
        return answer
    if isinstance(answer, BrokerError):
        return error_frame(answer, seq)
    return _confirm(seq, answer)


def _confirm(seq: Any, outcome: PublishOutcome) -> bytes:
    return b'{"type":"confirm","seq":%b,"results":%b,"durability":"%b"}' % (
        orjson.dumps(seq), outcome.results, outcome.durability.encode())
