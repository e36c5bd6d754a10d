"""`python -m bench.restart`: W6 up close. The time from spawning `chunkmq serve` on a store with a
backlog until /readyz answers 200 and until a pull right after it has a message, and the server's CPU
seconds at that moment; optionally for several builds of chunkmq (PYTHONPATH directories), their
restarts interleaved so that every build meets the same load.

    python -m bench.restart --backlog 100000 --repeat 8 [--variant before=/path/with/chunkmq ...]

Each variant restarts its own copy of one store, filled once with `--backlog` messages of 100 B.
For farm-bench, which times whole processes: `--fill DIR` fills a store, `--once DIR [--pythonpath P]`
restarts a server on it once, prints its figures and kills it (SIGKILL: no shutdown in the timing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.peers.chunkmq import _chunkmq_command, _compile_package
from bench.peers.process import ManagedProcess, free_port

QUEUE, GROUP = "restart", "g"


def call(port: int, method: str, path: str, body: object | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def spawn(data_dir: Path, port: int, pythonpath: str, log: Path) -> ManagedProcess:
    env = {**os.environ, "CHUNKMQ_AUTH": "off", "CHUNKMQ_LOG_LEVEL": "warning"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    process = ManagedProcess([*_chunkmq_command(), "serve", "--host", "127.0.0.1", "--port", str(port),
                              "--data-dir", str(data_dir)], env, log)
    process.start()
    return process


def ready(port: int) -> bool:
    return call(port, "GET", "/readyz")[0] == 200


def fill(data_dir: Path, backlog: int, log: Path) -> None:
    port = free_port()
    process = spawn(data_dir, port, "", log)
    try:
        process.wait_ready(lambda: ready(port), 120, "chunkmq")
        call(port, "PUT", f"/api/v1/queues/{QUEUE}", {})
        call(port, "PUT", f"/api/v1/queues/{QUEUE}/groups/{GROUP}", {"start": "earliest"})
        for start in range(0, backlog, 1000):
            batch = [{"body": "x" * 100}] * min(1000, backlog - start)
            status, raw = call(port, "POST", f"/api/v1/queues/{QUEUE}/publish", {"messages": batch})
            if status >= 300:
                raise RuntimeError(f"publish: {status} {raw[:200]!r}")
    finally:
        process.stop()


def restart(data_dir: Path, pythonpath: str, log: Path, kill: bool = False) -> dict[str, float]:
    """One start: seconds to /readyz 200, to a pulled message, and server CPU seconds at ready; with
    `kill`, the server is killed after (SIGKILL) rather than stopped."""
    port = free_port()
    t0 = time.monotonic()
    process = spawn(data_dir, port, pythonpath, log)
    try:
        process.wait_ready(lambda: ready(port), 120, "chunkmq")
        ready_s, cpu = time.monotonic() - t0, process.cpu_seconds()
        status, raw = call(port, "POST", f"/api/v1/queues/{QUEUE}/groups/{GROUP}/pull",
                           {"max_messages": 1, "wait_ms": 0, "consumer": "c"})
        if status != 200 or not json.loads(raw)["messages"]:
            raise RuntimeError(f"no message pulled right after /readyz: {status} {raw[:200]!r}")
        return {"ready_s": ready_s, "pulled_s": time.monotonic() - t0, "cpu_s": cpu}
    finally:
        if kill:
            os.killpg(process.pid, signal.SIGKILL)
        process.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.split("\n\n")[0])
    p.add_argument("--backlog", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=PYTHONPATH",
                   help="another build of chunkmq, first on PYTHONPATH (default: only the installed one)")
    p.add_argument("--fill", metavar="DIR", type=Path, help="only fill a store in DIR with --backlog messages")
    p.add_argument("--once", metavar="DIR", type=Path, help="only restart once on the store in DIR (see above)")
    p.add_argument("--pythonpath", default="", help="with --once: the build of chunkmq to run, first on PYTHONPATH")
    args = p.parse_args(argv)
    if args.fill:
        _compile_package()
        fill(args.fill, args.backlog, args.fill.parent / "fill.log")
        return 0
    if args.once:
        print(json.dumps(restart(args.once, args.pythonpath, args.once.parent / "once.log", kill=True)))
        return 0
    variants = {"installed": "", **dict(v.split("=", 1) for v in args.variant)}
    _compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        root = Path(tmp)
        fill(root / "store", args.backlog, root / "fill.log")
        for name in variants:
            shutil.copytree(root / "store", root / name, symlinks=True)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        loads = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            for name, pythonpath in variants.items():
                results[name].append(restart(root / name, pythonpath, root / f"{name}.log"))
            loads.append(os.getloadavg()[0])
    print(f"backlog {args.backlog:,} x 100 B, {args.repeat} restarts each (medians; min-max), "
          f"load average (1 min) {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    print("| build | /readyz 200 s | first message pulled s | server CPU s at ready |")
    print("|---|---:|---:|---:|")
    for name, runs in results.items():
        cells = []
        for key in ("ready_s", "pulled_s", "cpu_s"):
            xs = [r[key] for r in runs]
            cells.append(f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})")
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
