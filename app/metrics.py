"""Prometheus metrics (served at /metrics).

Message counts and queue gauges are read from the broker at scrape time (app/api/operations.py:
BrokerCollector), so the broker counts each thing once, in BrokerStats. Only what the broker does not
keep itself lives here.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily

from chunkmq.http import access_log

registry = CollectorRegistry(auto_describe=True)

fsync_wait = Histogram(
    "chunkmq_publish_durability_wait_seconds",
    "Time a publish waited for its durability barrier (the group-commit fsync in fsync=always)",
    buckets=(0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
    registry=registry,
)


class HotAnswers:
    """`chunkmq_hot_requests_total{route,status}`: the hot routes' answers (publish, pull), which the
    access log writes only when they are errors or slow (app/http/access_log.py)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("chunkmq_hot_requests", "Answers of the hot routes (publish, pull) "
                                     "written by the server's HTTP protocol, by route and status",
                                     labels=["route", "status"])
        for (route, status), count in sorted(access_log.ANSWERED.items()):
            family.add_metric([route, str(status)], count)
        yield family


registry.register(HotAnswers())
