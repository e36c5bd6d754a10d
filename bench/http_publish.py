"""HTTP publish and read-back throughput of chunkmq alone (issue: broker core and REST API).

    .venv/bin/python -m bench.http_publish [--count 1000000] [--batches 100,1000] [--clients 1,4]
                                           [--modes interval,always] [--size 100] [--wires json,binary]

Starts a chunkmq server (auth off, 127.0.0.1), then for every (mode, wire, batch, clients)
combination publishes --count messages of --size bytes into a fresh queue from that many client
processes and reads them back. Wire `json`: httpx with bodies encoded by orjson per batch, read
back with the browse endpoint (limit = batch). Wire `binary`: the Python client (chunkmq.client.Client)
with binary batch bodies, `publish_to_queue(..., binary=True)`, read back through a consumer group
with `pull(..., binary=True, ack_up_to=...)`, every batch acknowledged on the next pull (one group
per client process, each sought to the start of its share). Prints msgs/s, MB/s, p50/p99
request latency and the CPU seconds of the server and of the clients, one JSON line each; on a
shared machine messages per CPU second compare runs better than wall time does.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import orjson

from bench.peers.chunkmq import ChunkmqServer
from chunkmq.client import Client


@dataclass
class Result:
    what: str
    mode: str
    wire: str
    batch: int
    clients: int
    messages: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    client_cpu_s: float


def _publish_worker(url: str, queue: str, count: int, batch: int, size: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    body = "x" * size
    latencies: list[float] = []
    cpu = _cpu()  # the work from here on, not the process's start-up
    with httpx.Client(base_url=url, timeout=60) as client:
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            payload = orjson.dumps({"messages": [{"body": body} for _ in range(n)]})
            started = time.perf_counter()
            response = client.post(f"/api/v1/queues/{queue}/publish", content=payload,
                                   headers={"content-type": "application/json"})
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            sent += n
    out.put((latencies, _cpu() - cpu))


def _read_worker(url: str, queue: str, start: int, end: int, batch: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    latencies: list[float] = []
    cpu = _cpu()  # the work from here on, not the process's start-up
    with httpx.Client(base_url=url, timeout=60) as client:
        offset = start
        while offset < end:
            started = time.perf_counter()
            response = client.get(f"/api/v1/queues/{queue}/messages",
                                  params={"offset": offset, "limit": min(batch, end - offset)})
            page = orjson.loads(response.content)
            latencies.append(time.perf_counter() - started)
            if not page["messages"]:
                raise RuntimeError(f"read stalled at offset {offset}")
            offset = page["next_offset"]
    out.put((latencies, _cpu() - cpu))


def _publish_binary_worker(url: str, queue: str, count: int, batch: int, size: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    body = "x" * size  # text, as in the JSON rows
    latencies: list[float] = []
    cpu = _cpu()  # the work from here on, not the process's start-up
    with Client(url, timeout=60) as client:
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            started = time.perf_counter()
            client.publish_to_queue(queue, [body] * n, binary=True)
            latencies.append(time.perf_counter() - started)
            sent += n
    out.put((latencies, _cpu() - cpu))


def _pull_binary_worker(url: str, queue: str, start: int, end: int, batch: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    latencies: list[float] = []
    cpu = _cpu()  # the work from here on, not the process's start-up
    group = f"read-{start}"
    with Client(url, timeout=60) as client:
        client.declare_group(queue, group)
        client.seek(queue, group, offset=start)
        done, ack = start, None
        while done < end:
            started = time.perf_counter()
            messages = client.pull(queue, group, min(batch, end - done), ack_up_to=ack, binary=True)
            latencies.append(time.perf_counter() - started)
            if not messages:
                raise RuntimeError(f"read stalled at offset {done}")
            done = ack = messages[-1].offset + 1
        client.ack(queue, group, up_to=done)
    out.put((latencies, _cpu() - cpu))


def _cpu() -> float:
    """CPU seconds of this process so far (a client's own share of a row)."""
    times = os.times()
    return times.user + times.system


def _run(target: object, args_per_client: list[tuple[object, ...]], server: ChunkmqServer) -> Run:
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=target, args=(*a, out)) for a in args_per_client]  # type: ignore[arg-type]
    started = time.perf_counter()
    for p in procs:
        p.start()
    server_cpu = server.cpu_seconds()
    answers = [out.get(timeout=3600) for _ in procs]
    latencies = [x for lat, _ in answers for x in lat]
    for p in procs:
        p.join()
    return Run(time.perf_counter() - started, latencies, server.cpu_seconds() - server_cpu, sum(c for _, c in answers))


@dataclass
class Run:
    seconds: float
    latencies: list[float]
    server_cpu: float  # CPU seconds of the server process meanwhile
    client_cpu: float  # of the client processes, from their first request


def _result(what: str, mode: str, wire: str, batch: int, clients: int, count: int, size: int, run: Run) -> Result:
    lat = sorted(run.latencies)
    return Result(what, mode, wire, batch, clients, count, round(run.seconds, 3), round(count / run.seconds),
                  round(count * size / run.seconds / 1e6, 1), round(statistics.median(lat) * 1000, 2),
                  round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2),
                  round(run.server_cpu, 2), round(run.client_cpu, 2))


def run(count: int, batches: list[int], clients: list[int], modes: list[str], size: int,
        wires: list[str]) -> list[Result]:
    results: list[Result] = []
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="chunkmq-bench-") as tmp:
            server = ChunkmqServer(Path(tmp), fsync=mode, auth="off")
            server.start()
            url = f"http://127.0.0.1:{server.port}"
            try:
                for wire, batch, n in itertools.product(wires, batches, clients):
                    publisher, reader = WORKERS[wire]
                    queue = f"bench-{mode}-{wire}-{batch}-{n}"
                    httpx.put(f"{url}/api/v1/queues/{queue}", json={}).raise_for_status()
                    per = count // n
                    pub = _run(publisher, [(url, queue, per, batch, size) for _ in range(n)], server)
                    results.append(_result("publish", mode, wire, batch, n, per * n, size, pub))
                    print(orjson.dumps(asdict(results[-1])).decode(), flush=True)
                    total = per * n
                    ranges = [(i * total // n, (i + 1) * total // n) for i in range(n)]
                    read = _run(reader, [(url, queue, a, b, batch) for a, b in ranges], server)
                    results.append(_result("read", mode, wire, batch, n, total, size, read))
                    print(orjson.dumps(asdict(results[-1])).decode(), flush=True)
                    httpx.delete(f"{url}/api/v1/queues/{queue}", params={"force": "true"})
            finally:
                server.stop()
    return results


WORKERS = {"json": (_publish_worker, _read_worker), "binary": (_publish_binary_worker, _pull_binary_worker)}


def markdown(results: list[Result]) -> str:
    lines = ["| what | fsync | wire | batch | clients | msgs/s | MB/s | p50 ms | p99 ms | server CPU s | client CPU s "
             "| msgs per server+client CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.what} | {r.mode} | {r.wire} | {r.batch} | {r.clients} | {r.msgs_per_s:,} | {r.mb_per_s} "
              f"| {r.p50_ms} | {r.p99_ms} | {r.server_cpu_s} | {r.client_cpu_s} "
              f"| {round(r.messages / (r.server_cpu_s + r.client_cpu_s)):,} |"
              for r in results]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--batches", default="100,1000")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--modes", default="interval,always")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--wires", default="json,binary")
    args = parser.parse_args(argv)
    wires = args.wires.split(",")
    if not set(wires) <= WORKERS.keys():
        parser.error(f"--wires: choose from {', '.join(WORKERS)}")
    results = run(args.count, [int(b) for b in args.batches.split(",")], [int(c) for c in args.clients.split(",")],
                  args.modes.split(","), args.size, wires)
    print(markdown(results))


if __name__ == "__main__":
    main()
