"""W8: single-message publishes at full speed, one message per request on N keep-alive connections.

HTTP is driven by `wrk` (C, one thread) with a Lua script, so the load generator is not what limits
the rate; the WebSocket publish stream by an asyncio client on uvloop (`python -m bench.single ws`),
one frame in flight per connection. Beside each chunkmq figure the run measures the bare ASGI floor
(bench/floor.py) on the same server stack and options, and RabbitMQ's HTTP publish is the peer.
Server CPU comes from /proc (the server's process tree, before and after).
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import orjson

from bench.client import body_of
from bench.peers.chunkmq import ChunkmqServer
from bench.peers.process import ManagedProcess, free_port
from bench.peers.server import Endpoint, Server, http_status

# wrk's own summary, as one JSON line: latencies in microseconds.
DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%d,"duration_us":%d,"errors":%d,"status_errors":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class Request:
    """One POST, repeated: what wrk sends."""

    url: str
    body: bytes
    headers: dict[str, str]

    def script(self) -> str:
        lua = ['wrk.method = "POST"', f"wrk.body = {_lua_string(self.body)}"]
        lua += [f"wrk.headers[{_lua_string(k.encode())}] = {_lua_string(v.encode())}" for k, v in self.headers.items()]
        return "\n".join(lua) + "\n" + DONE


def _lua_string(data: bytes) -> str:
    return '"' + "".join(f"\\{b:03d}" for b in data) + '"'


def chunkmq_request(port: int, queue: str, size: int, token: str = "") -> Request:
    body = orjson.dumps({"messages": [{"body": body_of(size).decode()}]})
    headers = {"Content-Type": "application/json"}
    if token:  # auth on, as chunkmq ships
        headers["Authorization"] = f"Bearer {token}"
    return Request(f"http://127.0.0.1:{port}/api/v1/queues/{queue}/publish", body, headers)


def rabbitmq_request(port: int, queue: str, size: int) -> Request:
    body = orjson.dumps({"properties": {"delivery_mode": 2}, "routing_key": queue,
                         "payload": body_of(size).decode(), "payload_encoding": "string"})
    auth = base64.b64encode(b"guest:guest").decode()
    return Request(f"http://127.0.0.1:{port}/api/exchanges/{quote('/', safe='')}/amq.default/publish", body,
                   {"Content-Type": "application/json", "Authorization": f"Basic {auth}"})


def wrk_binary() -> str:
    """Debian's wrk, installed with apt-get when missing (as the peers are, bench/peers/install.py)."""
    from bench.peers.install import _apt_install

    found = shutil.which("wrk")
    if found is None:
        error = _apt_install(["wrk"])
        found = shutil.which("wrk")
        if found is None:
            raise RuntimeError(f"wrk is not installed and could not be: {error}")
    return found


def run_wrk(request: Request, conns: int, seconds: float) -> dict[str, float]:
    """requests, seconds, p50_ms, p99_ms of `conns` connections sending `request` for `seconds`."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(request.script())
    try:
        out = subprocess.run([wrk_binary(), "-t1", f"-c{conns}", f"-d{max(seconds, 1):.0f}s", "-s", f.name,
                              request.url], capture_output=True, text=True, timeout=seconds + 60, check=False)
    finally:
        os.unlink(f.name)
    line = next((x for x in reversed(out.stdout.splitlines()) if x.startswith("{")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    got = orjson.loads(line)
    if got["errors"] or got["status_errors"]:
        raise RuntimeError(f"wrk: {got['errors']} socket errors, {got['status_errors']} non-2xx answers")
    return {"requests": got["requests"], "seconds": got["duration_us"] / 1e6,
            "p50_ms": got["p50_us"] / 1000, "p99_ms": got["p99_us"] / 1000}


def run_ws(url: str, frame: bytes, conns: int, seconds: float) -> dict[str, float]:
    """As run_wrk, over WebSocket: each connection sends `frame` (`SEQ` is replaced by a number) and
    waits for its answer before the next; in a separate process, so it does not share the caller's CPU."""
    out = subprocess.run([sys.executable, "-m", "bench.single", url, frame.decode(), str(conns), str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"WebSocket load failed: {out.stderr[-1000:]}")
    got: dict[str, float] = orjson.loads(out.stdout.splitlines()[-1])
    return got


async def _ws_load(url: str, frame: str, conns: int, seconds: float) -> dict[str, float]:
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    errors: list[str] = []
    head, _, tail = frame.partition("SEQ")

    async def one(ws: object) -> None:
        seq = 0
        while time.monotonic() < end:
            seq += 1
            t0 = time.perf_counter()
            await ws.send(f"{head}{seq}{tail}")  # type: ignore[attr-defined]
            answer = await ws.recv()  # type: ignore[attr-defined]
            latencies.append(time.perf_counter() - t0)
            text = answer if isinstance(answer, str) else answer.decode()
            if '"error"' in text:
                errors.append(text)
                return

    sockets = [await connect(url, compression=None, max_size=None) for _ in range(conns)]
    start = time.monotonic()
    end = start + seconds
    await asyncio.gather(*(one(ws) for ws in sockets))
    took = time.monotonic() - start
    for ws in sockets:
        await ws.close()
    if errors:
        raise RuntimeError(errors[0])
    latencies.sort()
    return {"requests": len(latencies), "seconds": took, "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


class FloorServer(Server):
    """bench/floor.py on a free port."""

    kind = "floor"
    start_timeout = 30.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.port = free_port()

    def _process(self) -> ManagedProcess:
        return ManagedProcess([sys.executable, "-m", "bench.floor", str(self.port)], dict(os.environ),
                              self.workdir / "floor.log", cwd=Path(__file__).resolve().parents[1])

    def _ready(self) -> bool:
        return http_status(f"http://127.0.0.1:{self.port}/") == 200

    def endpoint(self) -> Endpoint:
        return Endpoint(self.kind, self.port, self.port)


class ChunkmqAlways(ChunkmqServer):
    """chunkmq with fsync=always: W8's group-commit figures."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, "always")


def ws_publish_frame(queue: str, size: int) -> bytes:
    frame = {"type": "publish", "seq": 0, "messages": [{"body": body_of(size).decode(), "routing_key": queue}]}
    return orjson.dumps(frame).replace(b'"seq":0', b'"seq":SEQ')


if __name__ == "__main__":
    import uvloop

    print(orjson.dumps(uvloop.run(_ws_load(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))).decode())
