"""The workloads W1-W8, B and D, run from the parent against one running server through one adapter's clients.

Each workload function runs one repeat and returns its samples. Phases that belong together share a
queue inside one repeat (W1 produces what W2 consumes; W5 fills the backlog that W6 restarts with and
then drains), and every repeat starts from a freshly declared, empty queue.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.pool import Pool
from multiprocessing.synchronize import Event
from typing import Any

from bench.client import Phase, run_phase
from bench.config import BIG_BATCH, Config
from bench.metrics import METRICS, Sample
from bench.peers.server import Server, run_when_up
from bench.profile import Profiler
from bench.single import (
    ChunkmqAlways,
    FloorServer,
    Request,
    chunkmq_request,
    rabbitmq_request,
    run_wrk,
    run_ws,
    ws_publish_frame,
)

MiB = 1024 * 1024


@dataclass
class Session:
    """One adapter against one server: the client pool, the config and the samples gathered."""

    cfg: Config
    server: Server
    adapter: str
    pool: Pool
    ready: Event
    samples: list[Sample] = field(default_factory=list)

    def phase(self, kind: str, queue: str, count: int = 0, **kw: Any) -> tuple[dict[str, Any], float]:
        """Run one phase in a client process; returns its result and the server CPU seconds it cost."""
        kw = {"batch": self.cfg.batch, "pull": self.cfg.pull, "max_seconds": self.cfg.max_seconds, **kw}
        ph = Phase(kind, self.adapter, self.server.endpoint(), queue, count=count, timeout=self.cfg.timeout, **kw)
        cpu0 = self.server.cpu_seconds()
        result = self.pool.apply_async(run_phase, (ph,)).get(self.cfg.timeout + 60)
        return result, self.server.cpu_seconds() - cpu0

    def add(self, metric: str, repeat: int, value: float, result: dict[str, Any] | None = None,
            server_cpu: float = 0.0, **extra: Any) -> None:
        r = result or {}
        self.samples.append(Sample(self.adapter, metric, repeat, value, METRICS[metric].unit,
                                   messages=r.get("messages", 0), seconds=r.get("seconds", 0.0),
                                   client_cpu_s=r.get("client_cpu_s", 0.0), server_cpu_s=server_cpu,
                                   extra=extra))

    def throughput(self, metric: str, repeat: int, kind: str, queue: str, count: int, **kw: Any) -> int:
        """Run a produce or consume phase and record its rate; returns the messages it moved.

        A produce phase may stop at --max-seconds before `count` (slow peers would otherwise take most
        of the run); the consume that follows moves what was produced, and the rate is what counts.
        """
        result, cpu = self.phase(kind, queue, count, **kw)
        moved = result["messages"]
        if moved != count and not result.get("capped"):
            raise RuntimeError(f"{kind} moved {moved} of {count} messages")
        self.add(metric, repeat, moved / result["seconds"], result, cpu, **({"capped": True} if moved != count else {}))
        return moved

    @contextlib.contextmanager
    def queue(self, name: str) -> Iterator[str]:
        self.phase("declare", name)
        try:
            yield name
        finally:
            self.phase("delete", name)

    def profiled(self, workload: str, repeat: int) -> contextlib.AbstractContextManager[object]:
        """py-spy on the chunkmq server for W1, W2, W4 and B of the first repeat, when asked for."""
        if not (self.cfg.profile and repeat == 0 and self.server.kind == "chunkmq"
                and self.server.process is not None):
            return contextlib.nullcontext()
        return Profiler(self.server.process.pid, self.cfg.out_dir / f"profile-{self.adapter}-{workload}")


def w1_w2(s: Session, r: int) -> None:
    cfg = s.cfg
    with s.queue(f"bench-w1-{r}") as q:
        with s.profiled("W1", r):
            n = s.throughput("w1_produce", r, "produce", q, cfg.count, size=cfg.size)
        with s.profiled("W2", r):
            # Pulls of up to the window (1,000): the large batches chunkmq's binary answer is for.
            s.throughput("w2_consume", r, "consume", q, n, bulk=True)


def w3(s: Session, r: int) -> None:
    cfg = s.cfg
    with s.queue(f"bench-w3-{r}") as q:
        n = s.throughput("w3_produce", r, "produce", q, cfg.w3_count, size=cfg.big_size)
        s.throughput("w3_consume", r, "consume", q, n)


def w4(s: Session, r: int) -> None:
    cfg = s.cfg
    n = int(cfg.latency_rate * cfg.latency_seconds)
    with s.queue(f"bench-w4-{r}") as q:
        s.ready.clear()
        base = Phase("latency_consume", s.adapter, s.server.endpoint(), q, count=n, size=cfg.size,
                     pull=cfg.pull, timeout=cfg.latency_seconds + 120, rate=cfg.latency_rate)
        cpu0 = s.server.cpu_seconds()
        with s.profiled("W4", r):
            consumer = s.pool.apply_async(run_phase, (base,))
            producer = s.pool.apply_async(run_phase, (replace(base, kind="latency_produce"),))
            sent = producer.get(base.timeout + 60)
            got = consumer.get(base.timeout + 60)
        cpu = s.server.cpu_seconds() - cpu0
    achieved = sent["messages"] / sent["seconds"]
    for key in ("p50", "p99", "max"):
        s.add(f"w4_{key}", r, got[f"{key}_ms"], got, cpu, achieved_rate=round(achieved, 1),
              producer_cpu_s=sent["client_cpu_s"])
    s.add("w4_rate", r, achieved, sent, asked_rate=cfg.latency_rate)


def w5_w6(s: Session, r: int) -> None:
    cfg = s.cfg
    # A fresh, empty server per repeat: earlier repeats' garbage (an AOF that keeps every XADD and DEL,
    # message stores awaiting compaction) would otherwise count against whoever runs last.
    s.server.reset()
    with s.queue(f"bench-w5-{r}") as q:
        disk0, rss0 = s.server.disk_bytes(), s.server.rss_bytes()
        # The whole backlog, never cut short: the restart time depends on its size.
        s.throughput("w5_fill", r, "produce", q, cfg.w5_count, size=cfg.size, max_seconds=0.0)
        rss, disk = s.server.rss_bytes(), s.server.disk_bytes()
        s.add("w5_rss", r, rss / MiB, empty_server_mib=round(rss0 / MiB, 1))
        # Allocated blocks (like `du`) above the empty server's, so preallocated files count in full.
        s.add("w5_disk", r, (disk - disk0) / MiB, bytes=disk - disk0, empty_server_bytes=disk0,
              bytes_per_message=round((disk - disk0) / cfg.w5_count, 1))
        restart = s.server.restart()
        s.add("w6_restart", r, restart, backlog=cfg.w5_count,
              rss_after_restart_mib=round(s.server.rss_bytes() / MiB, 1))
        if "W5" in cfg.workloads:  # W6 alone needs the backlog, not its drain
            s.throughput("w5_drain", r, "consume", q, cfg.w5_count)


def w7(s: Session, r: int) -> None:
    cfg = s.cfg
    with s.queue(f"bench-w7-{r}") as q:
        n = s.throughput("w7_publish", r, "produce", q, cfg.w7_count, size=cfg.size)
        s.throughput("w7_get", r, "consume", q, n)


def b(s: Session, r: int) -> None:
    """Publish in batches of 1,000 (each batch confirmed as stored), read back 1,000 per pull with acks."""
    cfg = s.cfg
    with s.queue(f"bench-b-{r}") as q:
        with s.profiled("B-publish", r):
            n = s.throughput("b_publish", r, "produce", q, cfg.count, size=cfg.size, batch=BIG_BATCH, bulk=True)
        with s.profiled("B-read", r):
            s.throughput("b_read", r, "consume", q, n, pull=BIG_BATCH, bulk=True)


def d(s: Session, r: int) -> None:
    """W1 + W2 on a server in the fsync-before-ack class (the runner starts it so)."""
    cfg = s.cfg
    with s.queue(f"bench-d-{r}") as q:
        n = s.throughput("d_produce", r, "produce", q, cfg.durable_count, size=cfg.size)
        s.throughput("d_consume", r, "consume", q, n, bulk=True)  # as W2's


def w8(s: Session, r: int) -> None:
    """Single-message publishes, one per request on `w8_conns` connections (bench/single.py), with the
    bare ASGI floor of the same server stack beside chunkmq's figures; on chunkmq-http also fsync=always
    on 1 and on `w8_conns` connections (group commit across connections)."""
    cfg = s.cfg
    port = s.server.endpoint().http_port
    token = s.server.endpoint().extra.get("token", "")
    ws = s.adapter == "chunkmq-ws"
    with s.queue(f"bench-w8-{r}") as q:
        if ws:
            url = f"ws://127.0.0.1:{port}/api/v1/exchanges/amq.default/stream" + (f"?token={token}" if token else "")
            frame = ws_publish_frame(q, cfg.size)
            load = lambda: run_ws(url, frame, cfg.w8_conns, cfg.w8_seconds)  # noqa: E731
        else:
            request = (rabbitmq_request(port, q, cfg.size) if s.adapter == "rabbitmq-http"
                       else chunkmq_request(port, q, cfg.size, token))
            load = lambda: run_wrk(request, cfg.w8_conns, cfg.w8_seconds)  # noqa: E731
        with s.profiled("W8", r):
            _w8_sample(s, s.adapter, "w8", r, s.server, load)
    if s.adapter not in ("chunkmq-http", "chunkmq-ws"):
        return
    with run_when_up(FloorServer) as floor:
        fport = floor.endpoint().port
        if ws:
            load = lambda: run_ws(f"ws://127.0.0.1:{fport}/", ws_publish_frame("q", cfg.size), cfg.w8_conns,  # noqa: E731
                                  cfg.w8_seconds)
            _w8_sample(s, "floor-ws", "w8", r, floor, load)
        else:
            floor_request = Request(chunkmq_request(fport, "q", cfg.size).url, request.body, request.headers)
            _w8_sample(s, "floor-http", "w8", r, floor, lambda: run_wrk(floor_request, cfg.w8_conns, cfg.w8_seconds))
    if ws:
        return
    with (run_when_up(ChunkmqAlways) as durable,
          Session(cfg, durable, s.adapter, s.pool, s.ready).queue(f"bench-w8a-{r}") as q):
        request = chunkmq_request(durable.endpoint().port, q, cfg.size, durable.endpoint().extra["token"])
        for conns in (1, cfg.w8_conns):
            _w8_sample(s, s.adapter, "w8_always_1" if conns == 1 else "w8_always_n", r, durable,
                       lambda c=conns: run_wrk(request, c, cfg.w8_seconds), rate_only=True, connections=conns)


def _w8_sample(s: Session, peer: str, metric: str, r: int, server: Server, load: Callable[[], dict[str, float]],
               rate_only: bool = False, **extra: Any) -> None:
    cpu0 = server.cpu_seconds()
    got = load()
    cpu = server.cpu_seconds() - cpu0
    n = int(got["requests"])
    rate = n / got["seconds"]
    common = {"messages": n, "seconds": got["seconds"], "server_cpu_s": cpu,
              "extra": {"connections": s.cfg.w8_conns, **extra}}
    values = {metric: rate} if rate_only else {
        "w8_rate": rate, "w8_cpu_us": cpu / max(n, 1) * 1e6, "w8_p50": got["p50_ms"], "w8_p99": got["p99_ms"]}
    for key, value in values.items():
        s.samples.append(Sample(peer, key, r, value, METRICS[key].unit, **common))  # type: ignore[arg-type]


# workload name -> (function, the workloads whose metrics it produces)
ROUTINES: dict[str, tuple[Callable[[Session, int], None], tuple[str, ...]]] = {
    "W1+W2": (w1_w2, ("W1", "W2")),
    "B": (b, ("B",)),
    "W3": (w3, ("W3",)),
    "W4": (w4, ("W4",)),
    "W5+W6": (w5_w6, ("W5", "W6")),
    "W7": (w7, ("W7",)),
    "D": (d, ("D",)),
    "W8": (w8, ("W8",)),
}

