"""WebSocket stream throughput and latency of chunkmq (issue: WebSocket streams and the client).

    .venv/bin/python -m bench.ws [--count 1000000] [--size 100] [--credit 1000] [--batch 100]
                                 [--in-flight 10] [--rate 2000] [--seconds 10] [--fsync interval]

Starts a chunkmq server (auth off, 127.0.0.1) in its own process, then from this process (raw
`websockets` + orjson, no compression, as the client library does):

1. publish: --count messages of --size bytes through /api/v1/exchanges/amq.default/stream, frames of
   --batch messages, --in-flight frames awaiting their confirm at any time;
2. consume: the same --count messages through the group stream with --credit credit, refilled as each
   frame arrives, and a cumulative ack (`up_to`) per frame;
3. latency: one message per publish frame at --rate msgs/s for --seconds, with a stream consumer
   waiting; end-to-end latency = receive time - send time, both in this process.

Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from bench.peers.chunkmq import ChunkmqServer


def _open(url: str) -> Any:
    return connect(url, compression=None, max_size=1 << 28)


async def publish(ws_base: str, queue: str, count: int, size: int, batch: int, in_flight: int) -> dict[str, Any]:
    body = "x" * size
    slots = asyncio.Semaphore(in_flight)
    async with _open(f"{ws_base}/api/v1/exchanges/amq.default/stream") as ws:

        async def confirms() -> None:
            expected = 0
            while expected < frames:
                answer = orjson.loads(await ws.recv())
                assert answer["type"] == "confirm" and answer["seq"] == expected, answer
                expected += 1
                slots.release()

        frames = (count + batch - 1) // batch
        reader = asyncio.create_task(confirms())
        started = time.perf_counter()
        for seq in range(frames):
            n = min(batch, count - seq * batch)
            await slots.acquire()
            await ws.send(orjson.dumps(
                {"type": "publish", "seq": seq, "messages": [{"body": body, "routing_key": queue}] * n}
            ))
        await reader
        seconds = time.perf_counter() - started
    return {"what": "publish stream", "messages": count, "batch": batch, "in_flight": in_flight,
            "seconds": round(seconds, 3), "msgs_per_s": round(count / seconds)}


async def consume(ws_base: str, queue: str, count: int, credit: int) -> dict[str, Any]:
    async with _open(f"{ws_base}/api/v1/queues/{queue}/groups/bench/stream?consumer=bench") as ws:
        started = time.perf_counter()
        await ws.send(b'{"type":"credit","n":%d}' % credit)
        received = 0
        while received < count:
            frame = orjson.loads(await ws.recv())
            messages = frame["messages"]
            received += len(messages)
            # One cumulative ack and one credit refill per frame (two small frames, no reply).
            await ws.send(b'{"type":"ack","up_to":%d}' % (messages[-1]["offset"] + 1))
            await ws.send(b'{"type":"credit","n":%d}' % len(messages))
        seconds = time.perf_counter() - started
    return {"what": "consume stream", "messages": received, "credit": credit, "ack": "cumulative per frame",
            "seconds": round(seconds, 3), "msgs_per_s": round(received / seconds)}


async def latency(ws_base: str, queue: str, rate: int, seconds: float, size: int) -> dict[str, Any]:
    pad = "x" * max(0, size - 20)
    latencies: list[float] = []
    total = int(rate * seconds)
    async with _open(f"{ws_base}/api/v1/queues/{queue}/groups/latency/stream") as consumer, \
            _open(f"{ws_base}/api/v1/exchanges/amq.default/stream") as producer:
        await consumer.send(b'{"type":"credit","n":1000}')

        async def receive(ws: ClientConnection) -> None:
            while len(latencies) < total:
                messages = orjson.loads(await ws.recv())["messages"]
                now = time.perf_counter_ns()
                for m in messages:
                    latencies.append((now - int(m["body"].split(" ", 1)[0])) / 1e6)
                await ws.send(orjson.dumps({"type": "ack", "offsets": [m["offset"] for m in messages]}))
                await ws.send(b'{"type":"credit","n":%d}' % len(messages))

        async def drain(ws: ClientConnection) -> None:
            for _ in range(total):
                await ws.recv()

        receiver = asyncio.create_task(receive(consumer))
        confirms = asyncio.create_task(drain(producer))
        interval = 1 / rate
        started = time.perf_counter()
        for seq in range(total):
            delay = started + seq * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = f"{time.perf_counter_ns()} {pad}"
            await producer.send(orjson.dumps(
                {"type": "publish", "seq": seq, "messages": [{"body": body, "routing_key": queue}]}
            ))
        await asyncio.gather(receiver, confirms)
    steady = sorted(latencies[min(rate, total // 5):])  # the first second (at most a fifth) warms up
    return {"what": "end-to-end latency over the streams", "rate": rate, "messages": len(latencies),
            "p50_ms": round(statistics.median(steady), 3),
            "p99_ms": round(steady[int(len(steady) * 0.99)], 3), "max_ms": round(steady[-1], 3)}


async def main_async(url: str, args: argparse.Namespace) -> None:
    ws_base = url.replace("http://", "ws://")
    async with httpx.AsyncClient(base_url=url) as api:
        for q in ("bench", "latency"):
            (await api.put(f"/api/v1/queues/{q}", json={})).raise_for_status()
        (await api.put("/api/v1/queues/bench/groups/bench", json={"start": "earliest"})).raise_for_status()
    print(orjson.dumps(await publish(ws_base, "bench", args.count, args.size, args.batch, args.in_flight)).decode(),
          flush=True)
    print(orjson.dumps(await consume(ws_base, "bench", args.count, args.credit)).decode(), flush=True)
    print(orjson.dumps(await latency(ws_base, "latency", args.rate, args.seconds, args.size)).decode(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--credit", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=10)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fsync", default="interval", choices=["interval", "always", "never"])
    parser.add_argument("--url", help="an already running server (default: start one)")
    args = parser.parse_args()
    print(orjson.dumps({"machine": {"cpus": os.cpu_count()}, "fsync": args.fsync}).decode(), flush=True)
    if args.url:
        asyncio.run(main_async(args.url.rstrip("/"), args))
        return
    with tempfile.TemporaryDirectory(prefix="chunkmq-bench-ws-") as tmp:
        server = ChunkmqServer(Path(tmp), fsync=args.fsync, auth="off")
        server.start()
        try:
            asyncio.run(main_async(f"http://127.0.0.1:{server.port}", args))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
