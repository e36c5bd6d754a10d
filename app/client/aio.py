"""The asyncio client: every REST call (httpx), and the WebSocket streams (websockets).

    async with AsyncClient("http://127.0.0.1:8000", token="...") as mq:
        async with mq.producer("") as producer:
            await producer.publish("hello", routing_key="orders")
        async with mq.consume("orders", "billing") as stream:
            async for message in stream:  # acked when the loop moves on
                ...
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, TypeVar

import httpx

from chunkmq.client import _calls as calls
from chunkmq.client._calls import NO_JSON, Call, MessageLike, auth_headers
from chunkmq.client._http import BACKOFF, IDEMPOTENT, RETRY_STATUSES, Response, ssl_context
from chunkmq.client.consumer import AsyncConsumer
from chunkmq.client.errors import ConnectionFailed
from chunkmq.client.models import (
    AckResult,
    BindingInfo,
    ExchangeInfo,
    GroupInfo,
    Message,
    NackResult,
    Page,
    Published,
    PulledBatch,
    QueueInfo,
)
from chunkmq.client.producer import AsyncProducer

T = TypeVar("T")


class AsyncClient:
    """Non-blocking client for one event loop. Errors are `chunkmq.client.errors` exceptions carrying the
    API error code. Close it (or use `async with`) to release its connections."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0, *,
                 retries: int = 2, verify: bool | str | ssl.SSLContext = True, proxy: str | None = None) -> None:
        """The arguments of `Client`: `url` defaults to CHUNKMQ_URL (else http://127.0.0.1:8000),
        `token` to CHUNKMQ_TOKEN; `timeout`, `retries`, `verify` and `proxy` as there."""
        self.url = calls.default_url(url)
        self.token = calls.default_token(token)
        self.timeout = timeout
        self.retries = retries
        self.http = httpx.AsyncClient(base_url=self.url, headers=auth_headers(self.token), timeout=timeout,
                                      verify=ssl_context(verify), proxy=proxy)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def _run(self, call: Call[T]) -> T:
        """The call, retried as Client's are (see `_http.Transport`)."""
        content, headers = call.content()
        timeout = self.timeout + call.extra_seconds
        delay = BACKOFF
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                r = await self.http.request(call.method, call.target, content=content, headers=headers, timeout=timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError) as exc:  # not sent
                if last:
                    raise ConnectionFailed(f"{call.method} {call.path}: {exc!r}") from exc
            except httpx.TransportError as exc:
                if last or call.method not in IDEMPOTENT:
                    raise ConnectionFailed(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                if r.status_code not in RETRY_STATUSES or last:
                    return call.finish(Response(r.status_code, r.content, r.headers))  # type: ignore[arg-type]
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay *= 2
        raise AssertionError("unreachable")

    # streams
    def consume(self, queue: str, group: str, *, consumer: str | None = None, credit: int = 1000,
                auto_ack: bool = True, retry_for: float = 60.0) -> AsyncConsumer:
        """A consumer on the group's WebSocket stream; use with `async with`, iterate with `async for`.
        See AsyncConsumer for credit refill, acks and reconnects."""
        return AsyncConsumer(self.url, self.token, queue, group, consumer=consumer, credit=credit,
                             auto_ack=auto_ack, retry_for=retry_for)

    def producer(self, exchange: str, *, batch_size: int = 100, max_in_flight: int = 10,
                 idempotent: bool = False, retry_for: float = 60.0) -> AsyncProducer:
        """A producer on the exchange's publish stream ("" is the default exchange); use with
        `async with`. See AsyncProducer for batching, pipelining and reconnects."""
        return AsyncProducer(self.url, self.token, exchange, batch_size=batch_size, max_in_flight=max_in_flight,
                             idempotent=idempotent, retry_for=retry_for)

    # exchanges
    async def exchanges(self) -> list[ExchangeInfo]:
        return await self._run(calls.list_exchanges())

    async def exchange(self, name: str) -> ExchangeInfo:
        return await self._run(calls.get_exchange(name))

    async def declare_exchange(self, name: str, type: str = "direct",
                               alternate_exchange: str | None = None) -> ExchangeInfo:
        return await self._run(calls.declare_exchange(name, type, alternate_exchange))

    async def delete_exchange(self, name: str, if_unused: bool = False) -> None:
        await self._run(calls.delete_exchange(name, if_unused))

    # queues
    async def queues(self, *, limit: int | None = None, after: str | None = None) -> list[QueueInfo]:
        """Every queue in name order; with `limit` (1-1000) and/or `after` (a queue name), one page:
        up to `limit` queues whose names sort after `after`."""
        return await self._run(calls.list_queues(limit, after))

    async def iter_queues(self, page_size: int = 100) -> AsyncIterator[QueueInfo]:
        """Every queue in name order, fetched a page of `page_size` at a time (as Client.iter_queues)."""
        after: str | None = None
        while True:
            page = await self.queues(limit=page_size, after=after)
            for queue in page:
                yield queue
            if len(page) < page_size:
                return
            after = page[-1].name

    async def queue(self, name: str) -> QueueInfo:
        return await self._run(calls.get_queue(name))

    async def declare_queue(self, name: str, **settings: Any) -> QueueInfo:
        """Settings as in API.md (max_messages, ack_timeout_ms, dead_letter_exchange, ...)."""
        return await self._run(calls.declare_queue(name, settings))

    async def update_queue(self, name: str, **changes: Any) -> QueueInfo:
        return await self._run(calls.update_queue(name, changes))

    async def delete_queue(self, name: str, force: bool = False) -> None:
        await self._run(calls.delete_queue(name, force))

    async def purge(self, name: str) -> int:
        return await self._run(calls.purge(name))

    async def browse(self, queue: str, offset: int | None = None, timestamp: int | None = None,
                     limit: int = 100) -> Page:
        return await self._run(calls.browse(queue, offset, timestamp, limit))

    async def message(self, message_id: str) -> Message:
        return await self._run(calls.get_message(message_id))

    # bindings
    async def bindings(self, exchange: str | None = None, queue: str | None = None) -> list[BindingInfo]:
        return await self._run(calls.list_bindings(exchange, queue))

    async def bind(self, exchange: str, queue: str, routing_key: str = "",
             arguments: Mapping[str, str] | None = None) -> BindingInfo:
        return await self._run(calls.bind(exchange, queue, routing_key, arguments))

    async def unbind(self, binding_id: int) -> None:
        await self._run(calls.unbind(binding_id))

    # publish
    async def publish(self, exchange: str, messages: MessageLike | Iterable[MessageLike] | None = None, *,
                      json: Any = NO_JSON, routing_key: str = "", mandatory: bool = False,
                      binary: bool | None = None, ttl_ms: int | None = None) -> Published:
        """One atomic batch through an exchange ("" is the default exchange): a str (text body),
        bytes (binary body), an OutgoingMessage (headers, tag, idempotency key, own routing key), or a
        list of them. `json=value` publishes one message whose body is the value as JSON text (a dict
        is never taken as a message). `mandatory=True`: Unroutable, and nothing stored, if a message
        reaches no queue. A batch in which no message has headers, a tag or an idempotency key goes
        as a binary batch (no JSON or base64 on either side); `binary=False` sends JSON, `binary=True`
        insists (ValueError for a message that needs JSON). `ttl_ms`: every message without its own
        expires this long after publish (sent as JSON)."""
        call = calls.publish(exchange, calls.to_publish(messages, json), routing_key, mandatory, binary, ttl_ms)
        return await self._run(call)

    async def publish_to_queue(self, queue: str, messages: MessageLike | Iterable[MessageLike] | None = None, *,
                               json: Any = NO_JSON, mandatory: bool = False, binary: bool | None = None,
                               ttl_ms: int | None = None) -> Published:
        """As publish, straight into one queue (no exchange, no routing key)."""
        return await self._run(
            calls.publish_to_queue(queue, calls.to_publish(messages, json), mandatory, binary, ttl_ms))

    # consumer groups
    async def groups(self, queue: str) -> list[GroupInfo]:
        return await self._run(calls.list_groups(queue))

    async def group(self, queue: str, group: str) -> GroupInfo:
        return await self._run(calls.get_group(queue, group))

    async def declare_group(self, queue: str, group: str, start: str = "earliest",
                      tag_filter: list[str] | None = None, *,
                      single_active_consumer: bool | None = None) -> GroupInfo:
        """`single_active_consumer`: one attached consumer at a time receives (None: unchanged)."""
        return await self._run(calls.declare_group(queue, group, start, tag_filter, single_active_consumer))

    async def delete_group(self, queue: str, group: str) -> None:
        await self._run(calls.delete_group(queue, group))

    async def pull(self, queue: str, group: str, max_messages: int = 100, wait_ms: int = 0,
             consumer: str = "default", *, ack_up_to: int | None = None, binary: bool = True) -> list[Message]:
        """`ack_up_to` acknowledges every offset below it first, in the same round trip. The answer
        comes as a binary batch (no JSON or base64 to decode); `binary=False` asks for JSON."""
        return await self._run(calls.pull(queue, group, max_messages, wait_ms, consumer, ack_up_to, binary))

    async def pull_batch(self, queue: str, group: str, max_messages: int = 100, wait_ms: int = 0,
                         consumer: str = "default", *, ack_up_to: int | None = None) -> PulledBatch:
        """A binary pull whose messages come as columns (PulledBatch: a list per field, no object per
        message): the fastest way to read large batches. `ack_up_to` as for pull."""
        return await self._run(calls.pull_batch(queue, group, max_messages, wait_ms, consumer, ack_up_to))

    async def ack(self, queue: str, group: str, offsets: Iterable[int] | None = None, *,
            up_to: int | None = None) -> AckResult:
        return await self._run(calls.ack(queue, group, offsets, up_to))

    async def nack(self, queue: str, group: str, offsets: Iterable[int], delay_ms: int = 0, *,
             requeue: bool = True) -> NackResult:
        """Hand messages back: redelivered after delay_ms, or dead-lettered past the queue's
        max_deliveries. `requeue=False` rejects them at once (to the dead-letter exchange, or dropped)."""
        return await self._run(calls.nack(queue, group, offsets, delay_ms, requeue))

    async def seek(self, queue: str, group: str, *, to: str | None = None, offset: int | None = None,
             timestamp: int | None = None) -> GroupInfo:
        return await self._run(calls.seek(queue, group, to, offset, timestamp))

    async def pause(self, queue: str, group: str, until_ms: int | None = None) -> GroupInfo:
        """Deliver nothing to the group's consumers (they stay connected) until `resume`, or until
        `until_ms` (epoch ms)."""
        return await self._run(calls.pause(queue, group, until_ms))

    async def resume(self, queue: str, group: str) -> GroupInfo:
        return await self._run(calls.resume(queue, group))

    # operations
    async def overview(self) -> dict[str, Any]:
        return await self._run(calls.overview())
