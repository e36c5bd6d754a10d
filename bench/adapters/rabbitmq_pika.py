"""RabbitMQ over AMQP 0-9-1 with pika's SelectConnection (its fastest mode).

pika's BlockingConnection waits for a publisher confirm after every single message, so it cannot
pipeline; the callback API can, and we drive its I/O loop synchronously: publish a whole batch, run the
loop until every confirm arrived (RabbitMQ sends them after the messages are fsynced), stop it.
Consume uses a prefetch window and a multiple-ack every 100 messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import pika
import pika.channel
import pika.spec

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.peers.server import Endpoint

ACK_EVERY = 100
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


def queue_arguments(endpoint: Endpoint) -> dict[str, str]:
    """`x-queue-type`: quorum queues in the fsync-before-ack class, classic queues otherwise."""
    return {"x-queue-type": endpoint.extra.get("queue_type", "classic")}


class RabbitmqPikaAdapter(Adapter):
    name = "rabbitmq"
    server = "rabbitmq"
    setup = (f"pika {version('pika')} SelectConnection; persistent messages, publisher confirms pipelined "
             "(the whole batch published, then its confirms awaited, multiple-confirms honoured); "
             "basic.consume with prefetch = the pull window, a multiple-ack every 100 messages")

    def _loop_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Run pika's I/O loop until `done()` (checked by callbacks, which stop the loop) or timeout."""
        loop = self.conn.ioloop
        deadline = time.monotonic() + timeout
        self._check = lambda: done() and loop.stop()
        try:
            while not done():
                if self.error is not None:
                    raise RuntimeError(f"rabbitmq: {self.error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"rabbitmq: {what} did not finish in {timeout:.0f}s")
                # Other callbacks (a channel closing) may stop the loop too: go round until done.
                timer = loop.call_later(left, loop.stop)
                loop.start()
                loop.remove_timeout(timer)
        finally:
            self._check = lambda: None

    def _fire(self, *_: Any) -> None:
        self._check()

    def _on_close(self, _conn: Any, reason: Exception) -> None:
        if not self.closing:
            self.error = repr(reason)
        self.conn.ioloop.stop()

    def open(self) -> None:
        self.error: str | None = None
        self.closing = False
        self.channel: pika.channel.Channel | None = None
        self._check: Callable[[], object] = lambda: None
        self.unconfirmed: set[int] = set()
        self.next_tag = 1
        params = pika.ConnectionParameters(host="127.0.0.1", port=self.endpoint.port,
                                           credentials=pika.PlainCredentials("guest", "guest"))

        def on_channel(ch: pika.channel.Channel) -> None:
            ch.add_on_close_callback(lambda _c, reason: self._on_close(None, reason))
            ch.confirm_delivery(self._on_confirm, callback=lambda _f: setattr(self, "channel", ch) or self._fire())

        self.conn = pika.SelectConnection(
            params, on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
            on_open_error_callback=self._on_close, on_close_callback=self._on_close)
        self._loop_until(lambda: self.channel is not None, 30, "connect")

    def close(self) -> None:
        self.closing = True
        if self.conn.is_open:
            self.conn.close()
            self._loop_until(lambda: self.conn.is_closed, 10, "close")

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            self.error = f"publish nacked (delivery tag {m.delivery_tag})"
            self.conn.ioloop.stop()
            return
        if m.multiple:
            self.unconfirmed = {t for t in self.unconfirmed if t > m.delivery_tag}
        else:
            self.unconfirmed.discard(m.delivery_tag)
        self._fire()

    def _rpc(self, start: Callable[[Callable[..., None]], None], what: str) -> None:
        box: list[bool] = []

        def ok(*_: Any) -> None:
            box.append(True)
            self._fire()
        start(ok)
        self._loop_until(lambda: bool(box), 30, what)

    def declare(self, queue: str) -> None:
        assert self.channel is not None
        ch = self.channel
        args = queue_arguments(self.endpoint)
        self._rpc(lambda ok: ch.queue_declare(queue, durable=True, arguments=args, callback=ok), "queue.declare")

    def delete(self, queue: str) -> None:
        assert self.channel is not None
        ch = self.channel
        self._rpc(lambda ok: ch.queue_delete(queue, callback=ok), "queue.delete")

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        assert self.channel is not None
        for body in bodies:
            self.channel.basic_publish("", queue, body, PERSISTENT)
            self.unconfirmed.add(self.next_tag)
            self.next_tag += 1
        self._loop_until(lambda: not self.unconfirmed, 60, "publisher confirms")

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        assert self.channel is not None
        ch = self.channel
        got = 0

        def on_message(_ch: Any, method: pika.spec.Basic.Deliver, _p: Any, body: bytes) -> None:
            nonlocal got
            if got >= n:
                return  # past n: left unacked, requeued when the channel closes
            got += 1
            if on_body is not None:
                on_body(body)
            if got % ACK_EVERY == 0 or got == n:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if got == n:
                self._fire()

        self._rpc(lambda ok: ch.basic_qos(prefetch_count=self.pull, callback=ok), "basic.qos")
        tag = ch.basic_consume(queue, on_message)
        try:
            self._loop_until(lambda: got >= n, deadline - time.monotonic(), "consume")
        except TimeoutError:
            raise ConsumeTimeout(f"rabbitmq: {got}/{n} messages before the deadline") from None
        self._rpc(lambda ok: ch.basic_cancel(tag, callback=ok), "basic.cancel")
        return got
