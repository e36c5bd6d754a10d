"""Prometheus metrics (served at /metrics).

Message counts and queue gauges are read from the broker at scrape time (app/api/operations.py:
BrokerCollector), so the broker counts each thing once, in BrokerStats. Only what the broker does not
keep itself lives here.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

registry = CollectorRegistry(auto_describe=True)

fsync_wait = Histogram(
    "chunkmq_publish_durability_wait_seconds",
    "Time a publish waited for its durability barrier (the group-commit fsync in fsync=always)",
    buckets=(0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
    registry=registry,
)
