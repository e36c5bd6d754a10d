"""The synchronous client: every REST call of the API over kept-alive HTTP connections (`_http.py`).

    with Client("http://127.0.0.1:8000", token="...") as mq:
        mq.declare_queue("orders")
        mq.publish("", ["hello"], routing_key="orders")
        with mq.consume("orders", "billing") as stream:  # WebSocket stream, acked as you go
            for message in stream:
                ...
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from chunkmq.client import _calls as calls
from chunkmq.client._calls import NO_JSON, Call, MessageLike, auth_headers
from chunkmq.client._http import Transport, env_proxy
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

if TYPE_CHECKING:
    from chunkmq.client.consumer import Consumer
    from chunkmq.client.producer import Producer

T = TypeVar("T")


class Client:
    """Blocking client. Errors are `chunkmq.client.errors` exceptions carrying the API error code.
    Thread-safe; close it (or use `with`) to release its connections."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0, *,
                 retries: int = 2, verify: bool | str | ssl.SSLContext = True, proxy: str | None = None) -> None:
        """`url` defaults to CHUNKMQ_URL (else http://127.0.0.1:8000), `token` to CHUNKMQ_TOKEN.
        `timeout`: seconds for each call (long polls add their wait). `retries`: further attempts,
        with exponential backoff, of a call the broker refused without changing anything (429, 503,
        507) or that could not connect, and of reads and declares whose connection was lost.
        `verify`: for https, True (the system's CA certificates), a CA file, an SSLContext, or
        False. `proxy`: an http:// proxy URL; by default HTTP_PROXY, HTTPS_PROXY and NO_PROXY."""
        self.url = calls.default_url(url)
        self.token = calls.default_token(token)
        self.http = Transport(self.url, auth_headers(self.token), timeout, verify=verify,
                              proxy=proxy if proxy is not None else env_proxy(self.url), retries=retries)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _run(self, call: Call[T]) -> T:
        content, headers = call.content()
        return call.finish(self.http.request(call.method, call.target, content, headers, call.extra_seconds))

    # streams
    def consume(self, queue: str, group: str, *, consumer: str | None = None, credit: int = 1000,
                auto_ack: bool = True, retry_for: float = 60.0, reader_thread: bool = True) -> Consumer:
        """A consumer on the group's WebSocket stream; use with `with`, iterate with `for`. The same
        consumer as AsyncClient.consume (credit refill, batched acks, reconnects), in the calling thread.
        `reader_thread=False`: the calling thread reads the socket itself (lowest latency; see Consumer)."""
        from chunkmq.client.consumer import Consumer  # the stream modules import this one

        return Consumer(self.url, self.token, queue, group, consumer=consumer, credit=credit, auto_ack=auto_ack,
                        retry_for=retry_for, reader_thread=reader_thread)

    def producer(self, exchange: str, *, batch_size: int = 100, max_in_flight: int = 10,
                 idempotent: bool = False, retry_for: float = 60.0, reader_thread: bool = True) -> Producer:
        """A producer on the exchange's publish stream ("" is the default exchange); use with `with`.
        The same producer as AsyncClient.producer (batching, pipelining, reconnects), in the calling thread.
        `reader_thread=False`: the calling thread reads the socket itself (lowest latency; see Producer)."""
        from chunkmq.client.producer import Producer  # the stream modules import this one

        return Producer(self.url, self.token, exchange, batch_size=batch_size, max_in_flight=max_in_flight,
                        idempotent=idempotent, retry_for=retry_for, reader_thread=reader_thread)

    # exchanges
    def exchanges(self) -> list[ExchangeInfo]:
        return self._run(calls.list_exchanges())

    def exchange(self, name: str) -> ExchangeInfo:
        return self._run(calls.get_exchange(name))

    def declare_exchange(self, name: str, type: str = "direct", alternate_exchange: str | None = None) -> ExchangeInfo:
        return self._run(calls.declare_exchange(name, type, alternate_exchange))

    def delete_exchange(self, name: str, if_unused: bool = False) -> None:
        self._run(calls.delete_exchange(name, if_unused))

    # queues
    def queues(self, *, limit: int | None = None, after: str | None = None) -> list[QueueInfo]:
        """Every queue in name order; with `limit` (1-1000) and/or `after` (a queue name), one page:
        up to `limit` queues whose names sort after `after`."""
        return self._run(calls.list_queues(limit, after))

    def iter_queues(self, page_size: int = 100) -> Iterator[QueueInfo]:
        """Every queue in name order, fetched a page of `page_size` at a time (each the next after the
        last name seen), so no single answer holds a hundred thousand queues."""
        after: str | None = None
        while True:
            page = self.queues(limit=page_size, after=after)
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].name

    def queue(self, name: str) -> QueueInfo:
        return self._run(calls.get_queue(name))

    def declare_queue(self, name: str, **settings: Any) -> QueueInfo:
        """Settings as in API.md (max_messages, ack_timeout_ms, dead_letter_exchange, ...)."""
        return self._run(calls.declare_queue(name, settings))

    def update_queue(self, name: str, **changes: Any) -> QueueInfo:
        return self._run(calls.update_queue(name, changes))

    def delete_queue(self, name: str, force: bool = False) -> None:
        self._run(calls.delete_queue(name, force))

    def purge(self, name: str) -> int:
        return self._run(calls.purge(name))

    def browse(self, queue: str, offset: int | None = None, timestamp: int | None = None, limit: int = 100) -> Page:
        return self._run(calls.browse(queue, offset, timestamp, limit))

    def message(self, message_id: str) -> Message:
        return self._run(calls.get_message(message_id))

    # bindings
    def bindings(self, exchange: str | None = None, queue: str | None = None) -> list[BindingInfo]:
        return self._run(calls.list_bindings(exchange, queue))

    def bind(self, exchange: str, queue: str, routing_key: str = "",
             arguments: Mapping[str, str] | None = None) -> BindingInfo:
        return self._run(calls.bind(exchange, queue, routing_key, arguments))

    def unbind(self, binding_id: int) -> None:
        self._run(calls.unbind(binding_id))

    # publish
    def publish(self, exchange: str, messages: MessageLike | Iterable[MessageLike] | None = None, *,
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
        return self._run(
            calls.publish(exchange, calls.to_publish(messages, json), routing_key, mandatory, binary, ttl_ms))

    def publish_to_queue(self, queue: str, messages: MessageLike | Iterable[MessageLike] | None = None, *,
                         json: Any = NO_JSON, mandatory: bool = False, binary: bool | None = None,
                               ttl_ms: int | None = None) -> Published:
        """As publish, straight into one queue (no exchange, no routing key)."""
        return self._run(calls.publish_to_queue(queue, calls.to_publish(messages, json), mandatory, binary, ttl_ms))

    # consumer groups
    def groups(self, queue: str) -> list[GroupInfo]:
        return self._run(calls.list_groups(queue))

    def group(self, queue: str, group: str) -> GroupInfo:
        return self._run(calls.get_group(queue, group))

    def declare_group(self, queue: str, group: str, start: str = "earliest",
                      tag_filter: list[str] | None = None, *,
                      single_active_consumer: bool | None = None) -> GroupInfo:
        """`single_active_consumer`: one attached consumer at a time receives (None: unchanged)."""
        return self._run(calls.declare_group(queue, group, start, tag_filter, single_active_consumer))

    def delete_group(self, queue: str, group: str) -> None:
        self._run(calls.delete_group(queue, group))

    def pull(self, queue: str, group: str, max_messages: int = 100, wait_ms: int = 0,
             consumer: str = "default", *, ack_up_to: int | None = None, binary: bool = True) -> list[Message]:
        """`ack_up_to` acknowledges every offset below it first, in the same round trip. The answer
        comes as a binary batch (no JSON or base64 to decode); `binary=False` asks for JSON."""
        return self._run(calls.pull(queue, group, max_messages, wait_ms, consumer, ack_up_to, binary))

    def pull_batch(self, queue: str, group: str, max_messages: int = 100, wait_ms: int = 0,
                   consumer: str = "default", *, ack_up_to: int | None = None) -> PulledBatch:
        """A binary pull whose messages come as columns (PulledBatch: a list per field, no object per
        message): the fastest way to read large batches. `ack_up_to` as for pull."""
        return self._run(calls.pull_batch(queue, group, max_messages, wait_ms, consumer, ack_up_to))

    def ack(self, queue: str, group: str, offsets: Iterable[int] | None = None, *,
            up_to: int | None = None) -> AckResult:
        return self._run(calls.ack(queue, group, offsets, up_to))

    def nack(self, queue: str, group: str, offsets: Iterable[int], delay_ms: int = 0, *,
             requeue: bool = True) -> NackResult:
        """Hand messages back: redelivered after delay_ms, or dead-lettered past the queue's
        max_deliveries. `requeue=False` rejects them at once (to the dead-letter exchange, or dropped)."""
        return self._run(calls.nack(queue, group, offsets, delay_ms, requeue))

    def seek(self, queue: str, group: str, *, to: str | None = None, offset: int | None = None,
             timestamp: int | None = None) -> GroupInfo:
        return self._run(calls.seek(queue, group, to, offset, timestamp))

    def pause(self, queue: str, group: str, until_ms: int | None = None) -> GroupInfo:
        """Deliver nothing to the group's consumers (they stay connected) until `resume`, or until
        `until_ms` (epoch ms)."""
        return self._run(calls.pause(queue, group, until_ms))

    def resume(self, queue: str, group: str) -> GroupInfo:
        return self._run(calls.resume(queue, group))

    # operations
    def overview(self) -> dict[str, Any]:
        return self._run(calls.overview())
