"""Run configuration: which peers, which workloads, how many messages, how many repeats."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ALL_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7")
ALL_PEERS = ("chunkmq-http", "chunkmq-ws", "rabbitmq", "rabbitmq-stream", "redis", "nats", "rabbitmq-http")


@dataclass
class Config:
    peers: list[str] = field(default_factory=lambda: list(ALL_PEERS))
    workloads: list[str] = field(default_factory=lambda: list(ALL_WORKLOADS))
    count: int = 1_000_000  # W1/W2; W3 uses count/5, W5 count*5, W7 count/100
    repeat: int = 3
    size: int = 100
    big_size: int = 1024
    batch: int = 100  # messages per confirmed produce call
    pull: int = 1000  # messages per pull / prefetch window
    latency_rate: int = 2000
    latency_seconds: float = 10.0
    # The durability class: chunkmq's --fsync mode, and the peers' equal of it ("always" = the
    # fsync-before-ack class: Redis appendfsync always, NATS sync_interval always, RabbitMQ quorum queues).
    fsync: str = "interval"
    timeout: float = 1800.0  # upper bound of any one phase
    out_dir: Path = Path("bench/results")
    profile: bool = False  # py-spy the chunkmq server during W1 and W2 (first repeat)
    smoke: bool = False

    @property
    def w3_count(self) -> int:
        return max(self.count // 5, 1)

    @property
    def w5_count(self) -> int:
        return self.count * 5

    @property
    def w7_count(self) -> int:
        return max(self.count // 100, 100)

    @classmethod
    def smoke_config(cls, out_dir: Path) -> Config:
        """Tiny counts, chunkmq only: proves the harness end to end in seconds (`make test`)."""
        return cls(peers=["chunkmq-http", "chunkmq-ws"], count=2_000, repeat=1, latency_rate=200,
                   latency_seconds=1.0, timeout=60.0, out_dir=out_dir, smoke=True)
