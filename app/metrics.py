"""Prometheus metrics (served at /metrics). Queue gauges are collected at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

registry = CollectorRegistry(auto_describe=True)

published = Counter("chunkmq_messages_published", "Messages stored by publishes", registry=registry)
delivered = Counter("chunkmq_messages_delivered", "Messages delivered to consumers", registry=registry)
acked = Counter("chunkmq_messages_acked", "Messages acknowledged by consumers", registry=registry)
dead_lettered = Counter("chunkmq_messages_dead_lettered", "Messages sent to a dead-letter exchange", registry=registry)
fsync_wait = Histogram(
    "chunkmq_publish_durability_wait_seconds",
    "Time a publish waited for its durability barrier (the group-commit fsync in fsync=always)",
    buckets=(0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
    registry=registry,
)
