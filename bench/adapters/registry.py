"""Peer names (as on the command line) -> adapter classes, and which server each needs."""

from __future__ import annotations

from bench.adapters.base import Adapter
from bench.adapters.chunkmq_http import ChunkmqHttpAdapter
from bench.adapters.chunkmq_ws import ChunkmqWsAdapter
from bench.adapters.nats_jetstream import NatsJetStreamAdapter
from bench.adapters.rabbitmq_amqp import RabbitmqAioPikaAdapter
from bench.adapters.rabbitmq_http import RabbitmqHttpAdapter
from bench.adapters.rabbitmq_pika import RabbitmqPikaAdapter
from bench.adapters.rabbitmq_stream import RabbitmqStreamAdapter
from bench.adapters.redis_streams import RedisStreamsAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    cls.name: cls
    for cls in (ChunkmqHttpAdapter, ChunkmqWsAdapter, RabbitmqPikaAdapter, RedisStreamsAdapter,
                NatsJetStreamAdapter, RabbitmqStreamAdapter, RabbitmqHttpAdapter, RabbitmqAioPikaAdapter)
}
CHUNKMQ = ("chunkmq-http", "chunkmq-ws")
#: adapters that speak a peer's HTTP API: they only run the HTTP workloads (W7, W8)
HTTP_ONLY = ("rabbitmq-http",)
#: adapters that run the HTTP workload (W7): chunkmq's REST against the peers' own HTTP
HTTP_CAPABLE = ("chunkmq-http", "rabbitmq-http")
#: adapters that run the single-message workload (W8): chunkmq's REST and publish stream, RabbitMQ's HTTP
W8_CAPABLE = ("chunkmq-http", "chunkmq-ws", "rabbitmq-http")
