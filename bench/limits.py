"""The limits of one node, one command per figure (docs/scaling.md).

    python -m bench.limits queues      [--sizes 1000,3000] [--samples 100] [--idle-seconds 10] [--env K=V]
    python -m bench.limits connections [--sizes 1000,5000,10000] [--idle-seconds 10] [--kinds websocket,longpoll]
    python -m bench.limits backlog     [--minutes 15] [--messages 100000000] [--clients 2]
    python -m bench.limits sustained   [--minutes 30] [--window 60] [--batch 1000] [--fraction 0.8]

Each starts its own `chunkmq serve` (auth off, 127.0.0.1, fsync=interval) on a temporary data
directory, deletes the directory after, and prints one JSON line per measurement (then a summary).
The defaults are small, for a smoke run; docs/scaling.md gives the sizes it was measured at.
Every line carries the 1-minute load average, since other work on the machine moves the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.console import login
from bench.peers.chunkmq import ChunkmqServer
from bench.peers.process import ManagedProcess
from bench.peers.server import run_when_up

BATCH_TYPE = "application/vnd.chunkmq.batch"


def raise_fd_limit() -> int:
    """Soft open-files limit up to the hard one; the server started after inherits it."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def load() -> float:
    return round(os.getloadavg()[0], 2)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def emit(record: dict[str, Any]) -> dict[str, Any]:
    print(orjson.dumps({**record, "load": load()}).decode(), flush=True)
    return record


def pct(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank), in the values' unit."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def binary_batch(bodies: list[bytes]) -> bytes:
    """A publish body in docs/api.md "Binary batches" layout: no routing key, byte bodies."""
    n = len(bodies)
    return b"".join((struct.pack(f"<I{n}I", n, *map(len, bodies)), bytes(2 * n), b"\x01" * n, *bodies))


class LimitServer(ChunkmqServer):
    """`chunkmq serve` with extra environment (connection cap, retention, allocator settings)."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(workdir, auth="off")
        self.env = env or {}
        self.start_timeout = 600.0  # a 100k-queue or big-backlog restart

    def _process(self) -> ManagedProcess:
        process = super()._process()
        process.env = {**process.env, "CHUNKMQ_MAX_CONNECTIONS": "30000", **self.env}
        return process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def server(env: dict[str, str] | None = None, workdir: Path | None = None) -> AbstractContextManager[LimitServer]:
    """A started server on a fresh data directory (under `workdir`), stopped and deleted afterwards."""
    return run_when_up(lambda root: LimitServer(root, env), prefix="chunkmq-limits-", parent=workdir)


def mb(n: float) -> float:
    return round(n / 1e6, 1)


def timed(call: Callable[[], Any]) -> float:
    """Milliseconds `call` takes."""
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1000


# --------------------------------------------------------------------------------- queues and groups


def import_queues(client: httpx.Client, start: int, end: int, step: int = 1000) -> float:
    """Declare queues q<start>..q<end-1>, each with group g, through definitions import; seconds."""
    t0 = time.perf_counter()
    for lo in range(start, end, step):
        names = [f"q{i:06d}" for i in range(lo, min(end, lo + step))]
        doc = {"queues": [{"name": n} for n in names], "groups": [{"queue": n, "name": "g"} for n in names]}
        r = client.post("/api/v1/definitions", content=orjson.dumps(doc),
                        headers={"content-type": "application/json"})
        r.raise_for_status()
    return time.perf_counter() - t0


def seed_queues(data_dir: Path, start: int, end: int) -> float:
    """Write queues q<start>..q<end-1>, each with group g, straight into the metadata database of a
    stopped server (one transaction) and make their index directories: the rows and directories a
    declaration makes, without its two fsyncs per queue and per group. Seconds."""
    from sqlalchemy import insert, select

    from chunkmq.meta import MetaStore
    from chunkmq.meta import models as m
    from chunkmq.storage import files

    t0 = time.perf_counter()
    names = [f"q{i:06d}" for i in range(start, end)]
    with MetaStore(f"sqlite:///{data_dir / 'meta.db'}") as meta, meta.engine.begin() as conn:
        conn.execute(insert(m.Queue), [{"name": n} for n in names])
        ids = conn.execute(select(m.Queue.id).where(m.Queue.name.in_(names))).scalars().all()
        conn.execute(insert(m.Group), [{"queue_id": q, "name": "g"} for q in ids])
    store = data_dir / "store"
    for q in ids:
        files.queue_dir(store, q).mkdir(mode=files.DIR_MODE, parents=True, exist_ok=True)
    return time.perf_counter() - t0


def publish_pull_latency(client: httpx.Client, queues: int, samples: int) -> dict[str, float]:
    """Single-message JSON publishes, each followed by a one-message pull, on random queues."""
    publish, pull = [], []
    body = orjson.dumps({"messages": [{"body": "x" * 100}]})
    headers = {"content-type": "application/json"}
    for _ in range(samples):
        q = f"q{random.randrange(queues):06d}"
        t0 = time.perf_counter()
        client.post(f"/api/v1/queues/{q}/publish", content=body, headers=headers).raise_for_status()
        t1 = time.perf_counter()
        r = client.post(f"/api/v1/queues/{q}/groups/g/pull", json={"max_messages": 1})
        r.raise_for_status()
        t2 = time.perf_counter()
        publish.append((t1 - t0) * 1000)
        pull.append((t2 - t1) * 1000)
        for m in r.json()["messages"]:
            client.post(f"/api/v1/queues/{q}/groups/g/ack", json={"offsets": [m["offset"]]})
    return {"publish_p50_ms": round(pct(publish, 0.5), 2), "publish_p99_ms": round(pct(publish, 0.99), 2),
            "pull_p50_ms": round(pct(pull, 0.5), 2), "pull_p99_ms": round(pct(pull, 0.99), 2)}


def _page_ms(client: httpx.Client, after: str, repeats: int = 5) -> float:
    """The median time of `GET /api/v1/queues?limit=100&after=<after>`, one page of the list."""
    params = {"limit": 100, "after": after}
    return round(statistics.median(
        timed(lambda: client.get("/api/v1/queues", params=params).raise_for_status()) for _ in range(repeats)), 1)


def page_ms(client: httpx.Client, path: str, repeats: int = 3) -> float:
    """The median time to load a console page (after one warm-up load)."""
    client.get(path).raise_for_status()
    return round(statistics.median(timed(lambda: client.get(path).raise_for_status()) for _ in range(repeats)), 1)


@contextmanager
def console(srv: LimitServer) -> Iterator[httpx.Client]:
    """A console session logged in as the admin user the server created at its first start."""
    password = (srv.data_dir / "admin-password").read_text().strip()
    with httpx.Client(base_url=srv.url, timeout=600) as client:
        login(client, password)
        yield client


def queues_figure(sizes: list[int], samples: int, idle: float, env: dict[str, str],
                  seed: bool = False) -> list[dict[str, Any]]:
    out = []
    with server(env) as srv:
        declared = 0
        for size in sizes:
            if seed:
                srv.stop()
                seconds = seed_queues(srv.data_dir, declared, size)
                srv.start()
            with httpx.Client(base_url=srv.url, timeout=600) as client:
                if not seed:
                    seconds = import_queues(client, declared, size)
                row: dict[str, Any] = {"figure": "queues", "queues": size, "groups": size,
                                       "declared": "seeded" if seed else "api", "declare_s": round(seconds, 2),
                                       "declared_per_s": round((size - declared) / seconds, 1)}
                declared = size
                row.update(publish_pull_latency(client, size, samples))
                row["rss_mb"] = mb(srv.rss_bytes())
                row["idle_cpu_percent"] = _cpu_percent(srv, idle)  # the periodic rounds (docs/scaling.md)
                with console(srv) as browser:
                    row["console_queues_ms"] = page_ms(browser, "/queues")
                    row["console_dashboard_ms"] = page_ms(browser, "/")
                    row["console_queues_by_messages_ms"] = page_ms(browser, "/queues?sort=messages")
                t0 = time.perf_counter()
                client.get("/api/v1/queues").raise_for_status()
                row["list_api_ms"] = round((time.perf_counter() - t0) * 1000, 1)
                row["list_page_api_ms"] = _page_ms(client, f"q{size // 2:06d}")  # a page from the list's middle
            row["restart_to_ready_s"] = round(srv.restart(), 2)
            row["rss_after_restart_mb"] = mb(srv.rss_bytes())
            out.append(emit({**row, "env": env}))
    return out


# ---------------------------------------------------------------------------------------- connections


async def _open_websockets(url: str, n: int, parallel: int = 200) -> list[Any]:
    """`n` consume streams granting credit on an empty queue, each handshake tried up to 3 times (on a
    loaded machine the server may drop a connection whose handshake it could not read in time)."""
    from websockets.asyncio.client import connect

    sem = asyncio.Semaphore(parallel)

    async def one(i: int) -> Any:
        async with sem:
            for attempt in range(3):
                try:
                    ws = await connect(f"{url}/api/v1/queues/idle/groups/g/stream?consumer=c{i}", max_size=2**20,
                                       ping_interval=None, open_timeout=120, compression=None)
                    break
                except Exception:
                    if attempt == 2:
                        raise
                    RETRIES[0] += 1
            await ws.send(b'{"type":"credit","n":10}')
            return ws

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _open_long_polls(port: int, n: int, wait_ms: int, parallel: int = 200) -> list[asyncio.StreamWriter]:
    """`n` pulls waiting on an empty queue, each on its own raw HTTP connection."""
    body = orjson.dumps({"max_messages": 1, "wait_ms": wait_ms, "consumer": "poll"})
    request = (b"POST /api/v1/queues/idle/groups/g/pull HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    sem = asyncio.Semaphore(parallel)

    async def one() -> asyncio.StreamWriter:
        async with sem:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            return writer

    return list(await asyncio.gather(*(one() for _ in range(n))))


RETRIES = [0]  # handshakes tried again, over the run


def _cpu_percent(srv: LimitServer, seconds: float) -> float:
    before = srv.cpu_seconds()
    time.sleep(seconds)
    return round((srv.cpu_seconds() - before) / seconds * 100, 2)


def _settle_rss(srv: LimitServer, seconds: float = 3.0) -> int:
    time.sleep(seconds)
    return srv.rss_bytes()


async def _connections(srv: LimitServer, sizes: list[int], idle: float, kind: str) -> list[dict[str, Any]]:
    out = []
    ws_url = srv.url.replace("http://", "ws://")
    for n in sizes:
        base = _settle_rss(srv, 1.0)
        t0 = time.perf_counter()
        if kind == "websocket":
            conns: list[Any] = await _open_websockets(ws_url, n)
        else:
            conns = await _open_long_polls(srv.port, n, int((idle + 20) * 1000))
        accept = time.perf_counter() - t0
        await asyncio.sleep(2)
        held = srv.rss_bytes()
        cpu = await asyncio.to_thread(_cpu_percent, srv, idle)
        t0 = time.perf_counter()
        if kind == "websocket":
            await asyncio.gather(*(ws.close() for ws in conns))
        else:
            for w in conns:
                w.close()
        close = time.perf_counter() - t0
        after = await asyncio.to_thread(_settle_rss, srv, 3.0)
        row = {"figure": "connections", "kind": kind, "connections": n, "accept_s": round(accept, 3),
               "rss_before_mb": mb(base), "rss_held_mb": mb(held),
               "kb_per_connection": round((held - base) / n / 1000, 1), "idle_cpu_percent": cpu,
               "close_s": round(close, 2), "rss_after_close_mb": mb(after), "handshake_retries": RETRIES[0]}
        if kind == "websocket":  # the same number again: is the memory the first ones left reused?
            conns = await _open_websockets(ws_url, n)
            await asyncio.sleep(2)
            row["rss_reopened_mb"] = mb(srv.rss_bytes())
            await asyncio.gather(*(ws.close() for ws in conns))
            await asyncio.sleep(3)
        out.append(emit({**row, "env": dict(srv.env)}))
    return out


def connections_figure(sizes: list[int], idle: float, kinds: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    raise_fd_limit()
    out = []
    for kind in kinds:
        with server(env) as srv:
            httpx.put(f"{srv.url}/api/v1/queues/idle", json={}).raise_for_status()
            httpx.put(f"{srv.url}/api/v1/queues/idle/groups/g", json={}).raise_for_status()
            out += asyncio.run(_connections(srv, sizes, idle, kind))
    return out


# ---------------------------------------------------------------------------------------------- backlog


def _publisher(url: str, queue: str, batch: int, size: int, deadline: float, budget: int,
               counter: Any) -> None:
    """Publish binary batches until the deadline or until the shared counter reaches the budget."""
    payload = binary_batch([b"x" * size] * batch)
    headers = {"content-type": BATCH_TYPE}
    with httpx.Client(base_url=url, timeout=120) as client:
        while time.time() < deadline:
            with counter.get_lock():
                if counter.value >= budget:
                    return
                counter.value += batch
            client.post(f"/api/v1/queues/{queue}/publish", content=payload, headers=headers).raise_for_status()


def backlog_figure(minutes: float, messages: int, clients: int, batch: int, size: int,
                   min_free_gb: float, workdir: Path | None) -> dict[str, Any]:
    with server(workdir=workdir) as srv, httpx.Client(base_url=srv.url, timeout=600) as client:
        client.put("/api/v1/queues/backlog", json={"max_age_seconds": None}).raise_for_status()
        free = shutil.disk_usage(srv.data_dir).free
        per_msg_guess = size + 60  # record overhead and index, refined by the run itself
        budget = min(messages, int((free - min_free_gb * 1e9) / per_msg_guess))
        counter = mp.get_context("fork").Value("q", 0)
        deadline = time.time() + minutes * 60
        t0 = time.perf_counter()
        procs = [mp.get_context("fork").Process(target=_publisher,
                                                args=(srv.url, "backlog", batch, size, deadline, budget, counter))
                 for _ in range(clients)]
        for p in procs:
            p.start()
        next_report = time.time() + 60
        while any(p.is_alive() for p in procs):
            time.sleep(1)
            if time.time() >= next_report:
                next_report += 60
                emit({"figure": "backlog", "progress_messages": counter.value,
                      "disk_gb": round(srv.disk_bytes() / 1e9, 2), "rss_mb": mb(srv.rss_bytes())})
        seconds = time.perf_counter() - t0
        for p in procs:
            p.join()
        stored = client.get("/api/v1/queues/backlog").json()["messages"]
        disk = srv.disk_bytes()
        row: dict[str, Any] = {"figure": "backlog", "messages": stored, "message_bytes": size,
                               "publish_s": round(seconds, 1), "msgs_per_s": round(stored / seconds),
                               "disk_gb": round(disk / 1e9, 2),
                               "disk_bytes_per_message": round(disk / max(stored, 1), 1),
                               "rss_mb": mb(srv.rss_bytes()), "restart_to_ready_s": round(srv.restart(), 2),
                               "rss_after_restart_mb": mb(srv.rss_bytes())}
        with httpx.Client(base_url=srv.url, timeout=600) as fresh:
            # the first request after the restart that the first stage does not answer waits for the
            # second (docs/scaling.md): the read again is what reading the oldest message costs
            for key in ("read_oldest_ms", "read_oldest_again_ms"):
                row[key] = round(timed(lambda: fresh.get(
                    "/api/v1/queues/backlog/messages", params={"offset": 0, "limit": 1}).raise_for_status()), 1)
            row["pull_oldest_ms"] = round(timed(lambda: fresh.post(
                "/api/v1/queues/backlog/groups/g/pull", json={"max_messages": 1}).raise_for_status()), 1)
            row["read_newest_ms"] = round(timed(lambda: fresh.get(
                "/api/v1/queues/backlog/messages", params={"offset": stored - 1, "limit": 1}).raise_for_status()), 1)
        return emit(row)


# -------------------------------------------------------------------------------------------- sustained


def _max_rate(client: httpx.Client, queue: str, payload: bytes, batch: int, seconds: float) -> float:
    headers = {"content-type": BATCH_TYPE}
    sent, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        client.post(f"/api/v1/queues/{queue}/publish", content=payload, headers=headers).raise_for_status()
        sent += batch
    return sent / (time.perf_counter() - t0)


def sustained_figure(minutes: float, fraction: float, window: float, batch: int, size: int,
                     max_age: int, probe_seconds: float, workdir: Path | None) -> dict[str, Any]:
    env = {"CHUNKMQ_RETENTION_INTERVAL_SECONDS": "5", "CHUNKMQ_CHUNK_SIZE": str(64 * 1024 * 1024)}
    with server(env, workdir) as srv, httpx.Client(base_url=srv.url, timeout=120) as client:
        client.put("/api/v1/queues/probe", json={}).raise_for_status()
        client.put("/api/v1/queues/steady", json={"max_age_seconds": max_age}).raise_for_status()
        payload = binary_batch([b"x" * size] * batch)
        maximum = _max_rate(client, "probe", payload, batch, probe_seconds)
        client.delete("/api/v1/queues/probe", params={"force": "true"})
        target = maximum * fraction
        interval = batch / target
        emit({"figure": "sustained", "max_msgs_per_s": round(maximum), "target_msgs_per_s": round(target),
              "batch": batch, "max_age_seconds": max_age})
        headers = {"content-type": BATCH_TYPE}
        windows: list[dict[str, Any]] = []
        start = time.perf_counter()
        due = start
        end = start + minutes * 60
        while time.perf_counter() < end:
            w_start, lat, sent = time.perf_counter(), [], 0
            while time.perf_counter() - w_start < window and time.perf_counter() < end:
                now = time.perf_counter()
                if now < due:
                    time.sleep(due - now)
                lat.append(timed(lambda: client.post("/api/v1/queues/steady/publish", content=payload,
                                                     headers=headers).raise_for_status()))
                sent += batch
                due += interval
                due = max(due, time.perf_counter() - 1.0)  # behind by over a second: do not burst to catch up
            elapsed = time.perf_counter() - w_start
            windows.append(emit({"figure": "sustained", "t_s": round(time.perf_counter() - start),
                                 "msgs_per_s": round(sent / elapsed), "p50_ms": round(pct(lat, 0.5), 2),
                                 "p99_ms": round(pct(lat, 0.99), 2), "max_ms": round(max(lat), 1),
                                 "rss_mb": mb(srv.rss_bytes()), "disk_mb": mb(srv.disk_bytes())}))
        total = sum(w["msgs_per_s"] for w in windows) / max(len(windows), 1)
        return emit({"figure": "sustained", "summary": True, "minutes": minutes, "max_msgs_per_s": round(maximum),
                     "mean_msgs_per_s": round(total), "worst_p99_ms": max(w["p99_ms"] for w in windows),
                     "rss_mb_first_last": [windows[0]["rss_mb"], windows[-1]["rss_mb"]],
                     "disk_mb_max": max(w["disk_mb"] for w in windows), "disk_mb_last": windows[-1]["disk_mb"]})


# ------------------------------------------------------------------------------------------------ main


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="figure", required=True)
    q = sub.add_parser("queues", help="declare queues with one group each: latency, restart, RSS, console")
    q.add_argument("--sizes", type=_ints, default=[100, 500], help="comma list, cumulative (default 100,500)")
    q.add_argument("--samples", type=int, default=50, help="single publishes + pulls per size")
    q.add_argument("--idle-seconds", type=float, default=2.0, help="window for the idle CPU at each size")
    q.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra server environment")
    q.add_argument("--seed", action="store_true",
                   help="write the queues into the stopped server's database instead of declaring them")
    c = sub.add_parser("connections", help="idle WebSocket consumers and long polls")
    c.add_argument("--sizes", type=_ints, default=[20, 50])
    c.add_argument("--idle-seconds", type=float, default=2.0, help="window for the idle CPU")
    c.add_argument("--kinds", default="websocket,longpoll")
    c.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="extra server environment, e.g. MALLOC_ARENA_MAX=2")
    b = sub.add_parser("backlog", help="publish 100 B messages until the budget, the time or the disk runs out")
    b.add_argument("--minutes", type=float, default=0.1)
    b.add_argument("--messages", type=int, default=100_000)
    b.add_argument("--clients", type=int, default=2)
    b.add_argument("--batch", type=int, default=10_000)
    b.add_argument("--size", type=int, default=100)
    b.add_argument("--min-free-gb", type=float, default=8.0, help="stop before the disk has less free")
    b.add_argument("--workdir", type=Path, help="where the data directory goes (default the temp dir)")
    s = sub.add_parser("sustained", help="publish at a fraction of the measured maximum, with retention")
    s.add_argument("--minutes", type=float, default=0.2)
    s.add_argument("--fraction", type=float, default=0.8)
    s.add_argument("--window", type=float, default=5.0, help="seconds per reported window")
    s.add_argument("--batch", type=int, default=100)
    s.add_argument("--size", type=int, default=100)
    s.add_argument("--max-age", type=int, default=60, help="the queue's max_age_seconds (retention)")
    s.add_argument("--probe-seconds", type=float, default=3.0, help="how long the maximum is measured")
    s.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    emit({"figure": args.figure, "cpu": cpu_model(), "cores": os.cpu_count(), "python": sys.version.split()[0]})
    if args.figure == "queues":
        queues_figure(args.sizes, args.samples, args.idle_seconds, dict(item.split("=", 1) for item in args.env),
                      args.seed)
    elif args.figure == "connections":
        env = dict(item.split("=", 1) for item in args.env)
        connections_figure(args.sizes, args.idle_seconds, args.kinds.split(","), env)
    elif args.figure == "backlog":
        backlog_figure(args.minutes, args.messages, args.clients, args.batch, args.size, args.min_free_gb, args.workdir)
    else:
        sustained_figure(args.minutes, args.fraction, args.window, args.batch, args.size, args.max_age,
                         args.probe_seconds, args.workdir)


if __name__ == "__main__":
    main()
