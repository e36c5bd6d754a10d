"""Run configuration: which peers, which workloads, how many messages, how many repeats."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# W1-W7 run in the default durability class; B is the batch workload (publish in batches of 1,000,
# read back with acks); D is W1 + W2 again in the fsync-before-ack class, on servers restarted for it.
# W8 is single-message publishes at full speed (bench/single.py).
ALL_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "B", "D", "W8")
#: what `python -m bench` runs without --workloads: the side-by-side table of docs/benchmarks.md
DEFAULT_WORKLOADS = ("W1", "W2", "W4", "W6", "B", "D", "W8")
DURABLE_WORKLOADS = ("D",)
ALL_PEERS = ("chunkmq-http", "chunkmq-ws", "rabbitmq", "rabbitmq-stream", "redis", "nats", "rabbitmq-http")
BIG_BATCH = 1000  # B: messages per publish and per pull


@dataclass
class Config:
    peers: list[str] = field(default_factory=lambda: list(ALL_PEERS))
    workloads: list[str] = field(default_factory=lambda: list(DEFAULT_WORKLOADS))
    count: int = 300_000  # W1/W2/B; W3 uses count/5, W7 count/100, D count/5
    repeat: int = 2
    size: int = 100
    big_size: int = 1024
    batch: int = 100  # messages per confirmed produce call
    pull: int = 1000  # messages per pull / prefetch window
    latency_rate: int = 2000
    latency_seconds: float = 10.0
    backlog: int = 100_000  # W5/W6: messages in the backlog the server restarts with
    max_seconds: float = 20.0  # a produce phase stops after this long (0 = only at its count)
    # The default class: chunkmq's --fsync mode, and the peers' equal of it. D always runs in the
    # fsync-before-ack class (chunkmq --fsync always, Redis appendfsync always, NATS sync_interval
    # always, RabbitMQ quorum queues).
    fsync: str = "interval"
    timeout: float = 1800.0  # upper bound of any one phase
    out_dir: Path = Path("bench/results")
    profile: bool = False  # py-spy the chunkmq server during W1, W2, W4 and B (first repeat)
    smoke: bool = False
    w8_conns: int = 8  # W8: connections, one request in flight on each
    w8_seconds: float = 5.0  # W8: seconds per measurement

    @property
    def w3_count(self) -> int:
        return max(self.count // 5, 1)

    @property
    def w5_count(self) -> int:
        return self.backlog

    @property
    def w7_count(self) -> int:
        return max(self.count // 100, 100)

    @property
    def durable_count(self) -> int:
        # fsync before every ack makes the slowest peers 5-10x slower: a fifth keeps the run short.
        return max(self.count // 5, 1)

    @classmethod
    def smoke_config(cls, out_dir: Path) -> Config:
        """Tiny counts, chunkmq only: proves the harness end to end in seconds (`make test`)."""
        return cls(peers=["chunkmq-http", "chunkmq-ws"], workloads=list(ALL_WORKLOADS), count=1_000, repeat=1,
                   latency_rate=200, latency_seconds=0.5, backlog=1_000, timeout=60.0, out_dir=out_dir, smoke=True,
                   w8_seconds=1.0)
