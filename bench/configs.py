"""`python -m bench.configs`: single-message HTTP publishes (W8's load: `wrk -t1 -c8`, one 100-byte
JSON message per `POST /api/v1/queues/q/publish`) against chunkmq in several configurations and the
bare ASGI floor (bench/floor.py), side by side in one run, the configurations taking turns in each
repeat so that a change in the machine's load falls on all of them. Server CPU per request is read
from /proc (the server's process tree) over the load.

The configurations: the defaults (auth on, the token in the header; the access log at INFO with
CHUNKMQ_ACCESS_LOG=notable); CHUNKMQ_ACCESS_LOG=all (a line per request); and auth off with
CHUNKMQ_LOG_LEVEL=warning (no token, no access log).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import httpx

from bench.peers.chunkmq import ChunkmqServer
from bench.peers.server import Server
from bench.single import FloorServer, Request, chunkmq_request, run_wrk

#: name -> (auth, CHUNKMQ_* settings)
CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "defaults (auth on, access log notable)": ("on", {}),
    "CHUNKMQ_ACCESS_LOG=all": ("on", {"CHUNKMQ_ACCESS_LOG": "all"}),
    "auth off, CHUNKMQ_LOG_LEVEL=warning": ("off", {"CHUNKMQ_LOG_LEVEL": "warning"}),
}
FLOOR = "bare ASGI floor"


def measure(server: Server, request: Request, conns: int, seconds: float) -> tuple[float, float]:
    """(server CPU us per request, requests/s) of one load."""
    cpu0 = server.cpu_seconds()
    got = run_wrk(request, conns, seconds)
    cpu = server.cpu_seconds() - cpu0
    return cpu / got["requests"] * 1e6, got["requests"] / got["seconds"]


def run(configs: list[str], repeat: int, conns: int, seconds: float, size: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in [*configs, FLOOR]}
    with tempfile.TemporaryDirectory(prefix="chunkmq-bench-configs-") as tmp:
        servers: dict[str, tuple[Server, Request]] = {}
        try:
            for i, name in enumerate(configs):
                auth, settings = CONFIGS[name]
                mq = ChunkmqServer(Path(tmp) / str(i), auth=auth, settings=settings)
                servers[name] = mq, chunkmq_request(mq.port, "q", size)  # stopped below if start fails
                mq.start()
                token = mq.endpoint().extra.get("token", "")
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                httpx.put(f"http://127.0.0.1:{mq.port}/api/v1/queues/q", json={}, headers=headers).raise_for_status()
                servers[name] = mq, chunkmq_request(mq.port, "q", size, token)
            floor = FloorServer(Path(tmp) / "floor")
            servers[FLOOR] = floor, chunkmq_request(floor.port, "q", size)
            floor.start()
            for _ in range(repeat):
                for name, (server, request) in servers.items():
                    results[name].append(measure(server, request, conns, seconds))
        finally:
            for server, _ in servers.values():
                server.stop()
    return results


def table(results: dict[str, list[tuple[float, float]]]) -> str:
    floor_cpu = statistics.median(cpu for cpu, _ in results[FLOOR])
    lines = ["| configuration | server CPU per request | requests/s |", "|---|---:|---:|"]
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        rate = statistics.median(r for _, r in runs)
        ratio = "" if name == FLOOR else f" ({cpu / floor_cpu:.2f}x the floor)"
        lines.append(f"| {name} | {cpu:.1f} us{ratio} | {rate:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.configs", description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--configs", default=",".join(str(i) for i in range(len(CONFIGS))),
                   help="comma list of configuration numbers: " + "; ".join(
                       f"{i} = {name}" for i, name in enumerate(CONFIGS)))
    a = p.parse_args(argv)
    names = [list(CONFIGS)[int(i)] for i in a.configs.split(",")]
    load_before = os.getloadavg()
    results = run(names, a.repeat, a.conns, a.seconds, a.size)
    print(table(results))
    print(f"\n- `wrk -t1 -c{a.conns} -d{a.seconds:.0f}s`, {a.size}-byte body, median of {a.repeat} turns; "
          f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} (2-core machines: "
          "above 1 the load generator and the server share a core with others)")


if __name__ == "__main__":
    main()
