"""The numbers the harness reports: one `Metric` per row of the table, one `Sample` per measurement."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Metric:
    key: str
    workload: str
    title: str
    unit: str
    higher_is_better: bool
    compared: bool = True  # False: context for the other rows (no chunkmq / best peer ratio)


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric("w1_produce", "W1", "W1 produce 100 B", "msgs/s", True),
    Metric("w2_consume", "W2", "W2 consume + ack 100 B", "msgs/s", True),
    Metric("w3_produce", "W3", "W3 produce 1 KiB", "msgs/s", True),
    Metric("w3_consume", "W3", "W3 consume + ack 1 KiB", "msgs/s", True),
    Metric("w4_p50", "W4", "W4 latency p50", "ms", False),
    Metric("w4_p99", "W4", "W4 latency p99", "ms", False),
    Metric("w4_max", "W4", "W4 latency max", "ms", False),
    # A latency is only "at 2,000 msgs/s" if the producer kept that pace: on a loaded machine it may not.
    Metric("w4_rate", "W4", "W4 publish rate reached", "msgs/s", True, compared=False),
    Metric("w5_fill", "W5", "W5 fill backlog 100 B", "msgs/s", True),
    Metric("w5_rss", "W5", "W5 server RSS with backlog", "MiB", False),
    Metric("w5_disk", "W5", "W5 disk bytes of backlog", "MiB", False),
    Metric("w5_drain", "W5", "W5 drain backlog (after restart)", "msgs/s", True),
    Metric("w6_restart", "W6", "W6 restart with backlog", "s", False),
    Metric("w7_publish", "W7", "W7 HTTP publish", "msgs/s", True),
    Metric("w7_get", "W7", "W7 HTTP get + ack", "msgs/s", True),
    Metric("b_publish", "B", "B publish, batches of 1,000 x 100 B", "msgs/s", True),
    Metric("b_read", "B", "B read back + ack, 1,000 per pull", "msgs/s", True),
    Metric("d_produce", "D", "D W1 produce, fsync before ack", "msgs/s", True),
    Metric("d_consume", "D", "D W2 consume + ack, fsync before ack", "msgs/s", True),
    Metric("w8_rate", "W8", "W8 single-message publishes", "req/s", True),
    Metric("w8_cpu_us", "W8", "W8 server CPU per request", "us", False),
    Metric("w8_p50", "W8", "W8 latency p50", "ms", False),
    Metric("w8_p99", "W8", "W8 latency p99", "ms", False),
    Metric("w8_always_1", "W8", "W8 fsync=always, 1 connection", "req/s", True, compared=False),
    Metric("w8_always_n", "W8", "W8 fsync=always, N connections", "req/s", True, compared=False),
)}


@dataclass
class Sample:
    """One measurement of one metric for one peer in one repeat; written as a JSON line."""

    peer: str
    metric: str
    repeat: int
    value: float | None
    unit: str
    messages: int = 0
    seconds: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": "sample", **asdict(self)}


@dataclass(frozen=True)
class Summary:
    median: float
    low: float
    high: float
    n: int

    @property
    def spread_pct(self) -> float:
        """Half the min-max range as a percentage of the median."""
        return 0.0 if self.median == 0 else 50.0 * (self.high - self.low) / abs(self.median)


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    return Summary(statistics.median(values), min(values), max(values), len(values))
