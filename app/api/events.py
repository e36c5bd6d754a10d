"""Server-sent events: a consumer group read by a browser's EventSource (or `curl -N`).

GET /api/v1/queues/{q}/groups/{g}/events?consumer=c1&prefetch=100[&token=...]

The consumer is the WebSocket consume stream's (app/api/streams.py), framed as text/event-stream:
the same group (`Broker.consumer_group`, created at `earliest` when absent), the same deliveries
(`Broker.deliver`: in flight for `consumer` until acked, redelivered after the ack timeout, counted
in the same metrics), woken by the queue's notify as the stream's sender is (`Queue.push_to`).
What differs is the framing and the credit: an EventSource cannot send frames, so its credit is
`prefetch` minus the messages this connection has in flight, given back by `POST .../ack` (or
`nack`, or their ack timeout); while none is left the stream looks again every ACK_POLL_SECONDS.

Each message is one event: `id:` its offset, `data:` the message as a pull returns it, on one line.
A reconnect with `Last-Event-ID` (an EventSource sends it by itself) and the same `consumer`
makes that consumer's unacked in-flight messages ready again at once (the stream's `resume=true`).
A comment line every CHUNKMQ_SSE_HEARTBEAT_SECONDS (15) keeps proxies from closing an idle stream.

Errors before the stream opens are the API's answers (401, 403, 404, 400 `invalid_request` for a
bad query, 409 `precondition_failed` for a queue hidden from consumers); one that ends an open
stream (the queue or group deleted, a storage error) is an `event: error` whose data is the API
error, then the end: the EventSource reconnects (a deleted queue: 404, and it stops; a deleted
group is created anew at `earliest`, as a pull creates it).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from chunkmq.api.allow import HEAD
from chunkmq.api.errors import api_error, error_body
from chunkmq.api.streams import MAX_FRAME_MESSAGES
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput, NotFound
from chunkmq.broker.group import Group, monotonic_ms
from chunkmq.broker.names import check_name
from chunkmq.broker.queue import Queue
from chunkmq.wire import codes

log = logging.getLogger("chunkmq.api.events")

router = APIRouter(tags=["streams"])

PATH = "/api/v1/queues/{queue}/groups/{group}/events"
DEFAULT_PREFETCH = 100
MAX_PREFETCH = 10_000
ACK_POLL_SECONDS = 0.1  # with no credit left, how often acks are looked for (the sweep's granularity)
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # nginx: do not buffer the stream
OPENED = b": connected\n\n"  # the first bytes: the answer's head goes out with them at once
HEARTBEAT = b": keep-alive\n\n"
# The scope key of a stream's end: `end()`, called by `chunkmq serve`'s HTTP protocol when the server
# shuts down (app/http/protocol.py), so that the stream ends at once rather than at the shutdown's timeout.
STREAM_END = "chunkmq.stream_end"


class _Wakeup:
    """What a stream waits for: the queue's notify (`wake`), or the server's shutdown (`end`)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.ended = False

    def wake(self) -> None:
        self.event.set()

    def end(self) -> None:
        self.ended = True
        self.event.set()


def _prefetch(request: Request) -> int:
    value = request.query_params.get("prefetch", str(DEFAULT_PREFETCH))
    if not value.isdigit() or not 1 <= int(value) <= MAX_PREFETCH:
        raise InvalidInput(f"prefetch must be an integer from 1 to {MAX_PREFETCH}", code=codes.INVALID_REQUEST)
    return int(value)


@router.get(PATH, include_in_schema=False)  # a stream, as the WebSocket routes: not in the OpenAPI document
async def events(request: Request, queue: str, group: str) -> Response:
    broker: Broker = request.app.state.broker
    prefetch = _prefetch(request)
    consumer = check_name(request.query_params.get("consumer") or f"sse-{secrets.token_hex(6)}", "consumer id")
    q, g = await broker.consumer_group(queue, group)
    if request.headers.get("last-event-id") is not None and g.release_consumer(consumer, monotonic_ms()):
        q.notify()
    if request.scope.get(HEAD):  # the head only: no message is delivered into a body nobody reads
        return Response(media_type=MEDIA_TYPE, headers=HEADERS)
    heartbeat = broker.settings.sse_heartbeat_seconds
    wakeup = _Wakeup()
    request.scope[STREAM_END] = wakeup.end  # the server's own scope (HeadAsGet copies only a HEAD's)
    return StreamingResponse(event_stream(broker, q, g, consumer, prefetch, heartbeat, wakeup),
                             media_type=MEDIA_TYPE, headers=HEADERS)


def _event(message: bytes) -> tuple[int, bytes]:
    """One message's offset and event. A message is rendered on one line; a raw line break (which
    would split the data field) is re-encoded away."""
    parsed = orjson.loads(message)
    if b"\n" in message or b"\r" in message:
        message = orjson.dumps(parsed)
    offset: int = parsed["offset"]
    return offset, b"id: %d\ndata: %b\n\n" % (offset, message)


async def event_stream(broker: Broker, queue: Queue, group: Group, consumer: str, prefetch: int,
                       heartbeat: float, wakeup: _Wakeup | None = None) -> AsyncIterator[bytes]:
    """The stream's bytes: deliveries to `consumer` while it has fewer than `prefetch` in flight on
    this connection, a comment after `heartbeat` seconds without any, until the client goes (the
    response cancels it), the queue or group is deleted, or the server shuts down (`wakeup.end`)."""
    wakeup = wakeup or _Wakeup()
    woken = wakeup.event
    stop_pushing = queue.push_to(wakeup.wake)
    detach = broker.attach_consumer(queue, group, consumer)  # single active consumer
    mine: set[int] = set()  # offsets delivered here, maybe still in flight for this consumer
    try:
        yield OPENED
        sent_at = time.monotonic()
        while not wakeup.ended:
            try:
                if not broker.is_current(queue):
                    raise NotFound(f"queue {queue.name!r} was deleted", code=codes.QUEUE_NOT_FOUND)
                if group.closed:
                    raise NotFound(f"group {group.name!r} on queue {queue.name!r} was deleted",
                                   code=codes.GROUP_NOT_FOUND)
                in_flight = group.in_flight
                mine = {o for o in mine if (e := in_flight.get(o)) is not None and e.consumer == consumer}
                room = min(prefetch - len(mine), MAX_FRAME_MESSAGES)
                woken.clear()  # before looking: a notify after the look wakes the wait below
                parts = broker.deliver(queue, group, consumer, room) if room > 0 else []
                delivered = [_event(part) for part in parts]
            except Exception as exc:
                error = api_error(exc)
                log.warning("event stream %s/%s (consumer %s) ended: %s %s",
                            queue.name, group.name, consumer, error.code, error.message)
                yield b"event: error\ndata: %b\n\n" % error_body(error.code, error.message)
                return
            if delivered:
                mine.update(offset for offset, _ in delivered)
                yield b"".join(event for _, event in delivered)
                sent_at = time.monotonic()
                continue
            quiet = heartbeat - (time.monotonic() - sent_at)
            if quiet <= 0:
                yield HEARTBEAT
                sent_at = time.monotonic()
                continue
            wait = quiet if room > 0 else min(quiet, ACK_POLL_SECONDS)
            try:
                await asyncio.wait_for(woken.wait(), wait)
            except TimeoutError:
                pass
    finally:
        stop_pushing()
        detach()
