"""What runs inside a client process: one phase of a workload through one adapter.

The parent keeps a pool of client processes per adapter (so interpreter start-up is never timed) and
sends each phase here as a plain `Phase`. Only the phase's core loop is timed: connecting and declaring
happen before the clock starts. Every loop is bounded by a message count and a deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from typing import Any

from bench.adapters.base import Adapter
from bench.adapters.registry import ADAPTERS
from bench.peers.server import Endpoint

_ready: Event | None = None  # set by the latency consumer once subscribed; the producer waits for it


def init_worker(ready: Event) -> None:
    global _ready
    _ready = ready


@dataclass(frozen=True)
class Phase:
    kind: str  # declare | delete | produce | consume | latency_produce | latency_consume
    adapter: str
    endpoint: Endpoint
    queue: str
    count: int = 0
    size: int = 100
    batch: int = 100
    pull: int = 1000
    timeout: float = 600.0
    rate: int = 0
    max_seconds: float = 0.0  # produce: stop after this long even if `count` is not reached (0 = never)
    bulk: bool = False  # large batches (B, W2 and D pulls): adapters use their server's fast form (Adapter.bulk)
    params: dict[str, Any] = field(default_factory=dict)


def body_of(size: int) -> bytes:
    """An ASCII body (every protocol can carry it as text) of exactly `size` bytes."""
    return (b"chunkmq-bench-" * (size // 14 + 1))[:size]


def stamped_body(size: int) -> bytes:
    """A body that starts with the send time (CLOCK_MONOTONIC is shared by all processes on a host)."""
    stamp = b"%020d" % time.monotonic_ns()
    return stamp + body_of(max(size - len(stamp), 0))


def _produce(a: Adapter, ph: Phase) -> tuple[int, bool]:
    """(messages sent, whether --max-seconds cut the phase short)."""
    body = body_of(ph.size)
    full = [body] * ph.batch
    sent = 0
    start = time.monotonic()
    deadline = start + ph.timeout
    while sent < ph.count:
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{ph.adapter}: produced {sent}/{ph.count} before the deadline")
        if ph.max_seconds and now - start > ph.max_seconds:
            return sent, True
        n = min(ph.batch, ph.count - sent)
        a.produce(ph.queue, full if n == ph.batch else full[:n])
        sent += n
    return sent, False


def _latency_produce(a: Adapter, ph: Phase) -> int:
    assert _ready is not None
    if not _ready.wait(60):
        raise TimeoutError("latency consumer never became ready")
    start = time.monotonic()
    for i in range(ph.count):
        wait = start + i / ph.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        a.produce(ph.queue, [stamped_body(ph.size)])
    return ph.count


def _percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def run_phase(ph: Phase) -> dict[str, Any]:
    """Run one phase; returns messages, timed seconds, client CPU seconds and phase-specific extras."""
    adapter = ADAPTERS[ph.adapter](ph.endpoint, pull=ph.pull, bulk=ph.bulk)
    with adapter:
        extra: dict[str, Any] = {}
        cpu0, t0 = time.process_time(), time.perf_counter()
        if ph.kind == "declare":
            adapter.delete(ph.queue)
            adapter.declare(ph.queue)
            n = 0
        elif ph.kind == "delete":
            adapter.delete(ph.queue)
            n = 0
        elif ph.kind == "produce":
            n, capped = _produce(adapter, ph)
            extra = {"capped": capped}
        elif ph.kind == "consume":
            n = adapter.consume(ph.queue, ph.count, time.monotonic() + ph.timeout)
        elif ph.kind == "latency_produce":
            n = _latency_produce(adapter, ph)
        elif ph.kind == "latency_consume":
            lat_ms: list[float] = []

            def on_body(body: bytes) -> None:
                lat_ms.append((time.monotonic_ns() - int(body[:20])) / 1e6)

            assert _ready is not None
            _ready.set()
            n = adapter.consume(ph.queue, ph.count, time.monotonic() + ph.timeout, on_body)
            lat_ms.sort()
            extra = {"p50_ms": _percentile(lat_ms, 0.50), "p99_ms": _percentile(lat_ms, 0.99),
                     "max_ms": lat_ms[-1]}
        else:
            raise ValueError(f"unknown phase {ph.kind!r}")
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return {"messages": n, "seconds": seconds, "client_cpu_s": cpu, **extra}
