"""The one client interface every system under test implements.

An adapter is used inside a client process: `open()`, then any number of `declare` / `produce` /
`consume` / `delete` calls, then `close()`. All calls are synchronous; adapters over asyncio clients run
their own event loop. `produce` returns only once the whole batch is acknowledged by the server as stored
(publisher confirms, pipelined XADD replies, JetStream PubAcks, chunkmq publish results).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from bench.peers.server import Endpoint

OnBody = Callable[[bytes], None]


class ConsumeTimeout(RuntimeError):
    """Raised when `consume` cannot get its n messages before the deadline."""


class Adapter(ABC):
    name: str = ""  # the peer name used on the command line and in reports
    server: str = ""  # which Server kind it talks to
    #: messages per produce call the workloads use (confirms per 100, pipelines of 100, ...)
    produce_batch: int = 100
    #: the client library and how it is driven, for the report header and docs/benchmarks.md
    setup: str = ""
    #: None if the peer can fsync before it acknowledges; else why it sits out that class (workload D)
    no_fsync_before_ack: str | None = None

    def __init__(self, endpoint: Endpoint, pull: int = 1000, bulk: bool = False) -> None:
        self.endpoint = endpoint
        self.pull = pull  # messages per pull / prefetch window on consume
        # The phase moves large batches (B's publishes of 1,000; pulls of up to the window of 1,000 in
        # W2, B and D): a server that documents a separate fast form for them (chunkmq's binary batch
        # body) is driven through it; the peers have one setup for all.
        self.bulk = bulk

    @classmethod
    def describe(cls, endpoint: Endpoint) -> str:
        """The client setup as run against `endpoint`; adapters add what they verify at run time."""
        return cls.setup

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def declare(self, queue: str) -> None:
        """Create a durable queue (stream) and the consumer group `bench` reading it from the start."""

    @abstractmethod
    def delete(self, queue: str) -> None:
        """Remove the queue and its data, so repeats start from the same state."""

    @abstractmethod
    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        """Publish `bodies` as one batch and return once every message is acknowledged as stored."""

    @abstractmethod
    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        """Receive and acknowledge `n` messages through group `bench`; calls `on_body` on arrival.

        `deadline` is a `time.monotonic()` value; raises ConsumeTimeout when it passes first.
        """

    def __enter__(self) -> Adapter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
