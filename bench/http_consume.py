"""HTTP consume throughput and end-to-end latency of chunkmq alone (issue: consumer groups).

    .venv/bin/python -m bench.http_consume [--count 1000000] [--consumers 1,4] [--rate 2000] [--seconds 10]

Starts a chunkmq server (auth off, 127.0.0.1, fsync=interval), fills a queue with --count messages of
100 bytes, then drains it with pull(max 1,000) + cumulative ack from 1 and from 4 consumer processes
of one group (each consumer acks what it pulled by offset). Then measures end-to-end latency: one
process publishes single messages at --rate per second carrying their send time, one consumer waits
in a long poll (wait_ms) and records receive time - send time. Last, --fanout connections each park
a long poll on a group of their own, one message is published, and the time until the last poll
is answered is measured. Prints JSON lines and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from bench.peers.chunkmq import ChunkmqServer
from bench.profile import Profiler

JSON = {"content-type": "application/json"}


def _fill(url: str, queue: str, count: int) -> None:
    body = orjson.dumps({"messages": [{"body": "x" * 100} for _ in range(1000)]})
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(count // 1000):
            client.post(f"/api/v1/queues/{queue}/publish", content=body, headers=JSON).raise_for_status()


def _drain(url: str, queue: str, group: str, consumer: str, total: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    got = 0
    request: dict[str, object] = {"max_messages": 1000, "wait_ms": 200, "consumer": consumer}
    with httpx.Client(base_url=url, timeout=60) as client:
        empty = 0
        while empty < 3:
            response = client.post(f"/api/v1/queues/{queue}/groups/{group}/pull", content=orjson.dumps(request),
                                   headers=JSON)
            request.pop("ack", None)
            messages = orjson.loads(response.content)["messages"]
            if not messages:
                empty += 1
                continue
            empty = 0
            got += len(messages)
            # The ack rides on the next pull. With competing consumers offsets interleave: ack
            # exactly what this consumer holds.
            request["ack"] = ({"offsets": [m["offset"] for m in messages]} if total
                              else {"up_to": messages[-1]["offset"] + 1})
    out.put(got)


def drain(url: str, queue: str, consumers: int) -> tuple[float, int]:
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    per_offset = 1 if consumers > 1 else 0
    procs = [mp.Process(target=_drain, args=(url, queue, "g", f"c{i}", per_offset, out)) for i in range(consumers)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    got = sum(out.get(timeout=3600) for _ in procs)
    for p in procs:
        p.join()
    # The last 3 empty polls of 200 ms each are not consumption time.
    return time.perf_counter() - started - 0.6, got


def _latency_consumer(url: str, queue: str, n: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    latencies: list[float] = []
    body = orjson.dumps({"max_messages": 1000, "wait_ms": 5000, "consumer": "lat"})
    with httpx.Client(base_url=url, timeout=60) as client:
        out.put("ready")
        while len(latencies) < n:
            response = client.post(f"/api/v1/queues/{queue}/groups/lat/pull", content=body, headers=JSON)
            now = time.time()
            messages = orjson.loads(response.content)["messages"]
            for m in messages:
                latencies.append(now - float(m["body"]))
            if messages:  # the ack rides on the next pull
                body = orjson.dumps({"max_messages": 1000, "wait_ms": 5000, "consumer": "lat",
                                     "ack": {"up_to": messages[-1]["offset"] + 1}})
    out.put(latencies)


def latency(url: str, queue: str, rate: int, seconds: float) -> list[float]:
    n = int(rate * seconds)
    httpx.put(f"{url}/api/v1/queues/{queue}/groups/lat", json={"start": "latest"}).raise_for_status()
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    consumer = mp.Process(target=_latency_consumer, args=(url, queue, n, out))
    consumer.start()
    assert out.get(timeout=60) == "ready"
    time.sleep(0.5)
    interval = 1.0 / rate
    with httpx.Client(base_url=url, timeout=60) as client:
        next_send = time.perf_counter()
        for _ in range(n):
            body = orjson.dumps({"messages": [{"body": repr(time.time())}]})
            client.post(f"/api/v1/queues/{queue}/publish", content=body, headers=JSON).raise_for_status()
            next_send += interval
            delay = next_send - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    latencies: list[float] = out.get(timeout=120)
    consumer.join()
    return latencies


async def _fanout(port: int, queue: str, polls: int, cpu: Callable[[], float],
                  profile: tuple[int, Path] | None) -> tuple[float, float]:
    """Seconds from one publish to the last of `polls` long polls (one group each) answered, and the
    server's CPU seconds meanwhile; py-spy samples the server meanwhile into `profile`."""

    async def request(writer: asyncio.StreamWriter, method: str, path: str, body: bytes) -> None:
        writer.write(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (method.encode(), path.encode(), len(body), body))
        await writer.drain()

    async def answer(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return await reader.readexactly(length)

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(polls):  # each group starts at the end: nothing to take yet
        await request(writer, "PUT", f"/api/v1/queues/{queue}/groups/f{i}", b'{"start":"latest"}')
        await answer(reader)
    pull = orjson.dumps({"max_messages": 1, "wait_ms": 30_000})
    streams = []
    for i in range(polls):  # a connection sends its request at once (the server's header timeout)
        streams.append(await asyncio.open_connection("127.0.0.1", port))
        await request(streams[-1][1], "POST", f"/api/v1/queues/{queue}/groups/f{i}/pull", pull)
    await asyncio.sleep(1.0)  # every poll is parked in the server
    with contextlib.ExitStack() as stack:
        if profile is not None:
            stack.enter_context(Profiler(*profile))
            await asyncio.sleep(0.5)  # py-spy attached
        used, started = cpu(), time.perf_counter()
        await request(writer, "POST", f"/api/v1/queues/{queue}/publish", b'{"messages":[{"body":"wake"}]}')
        await asyncio.gather(*(answer(r) for r, _ in streams))
        seconds, used = time.perf_counter() - started, cpu() - used
    for _, w in [*streams, (reader, writer)]:
        w.close()
    return seconds, used


def fanout(url: str, server: ChunkmqServer, polls: int, profile: Path | None) -> tuple[float, float]:
    httpx.put(f"{url}/api/v1/queues/fanout", json={}).raise_for_status()
    pid = server.process.pid if server.process is not None else 0
    return asyncio.run(_fanout(server.port, "fanout", polls, server.cpu_seconds,
                               (pid, profile) if profile is not None else None))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--consumers", default="1,4")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fanout", type=int, default=1000, help="long polls one publish wakes (0: skip)")
    parser.add_argument("--profile", type=Path,
                        help="py-spy the server during the latency run (PROFILE-latency.txt, .summary.md) "
                             "and the fan-out (PROFILE.txt, ...)")
    args = parser.parse_args(argv)
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chunkmq-bench-") as tmp:
        server = ChunkmqServer(Path(tmp), auth="off")
        server.start()
        url = f"http://127.0.0.1:{server.port}"
        try:
            for consumers in (int(c) for c in args.consumers.split(",")):
                queue = f"drain-{consumers}"
                httpx.put(f"{url}/api/v1/queues/{queue}", json={}).raise_for_status()
                _fill(url, queue, args.count)
                seconds, got = drain(url, queue, consumers)
                line = {"what": "drain", "consumers": consumers, "messages": got, "seconds": round(seconds, 3),
                        "msgs_per_s": round(got / seconds)}
                print(orjson.dumps(line).decode(), flush=True)
                rows.append(f"| drain, pull 1000 + ack | {consumers} | {got:,} | {line['msgs_per_s']:,} | | |")
            httpx.put(f"{url}/api/v1/queues/latency", json={}).raise_for_status()
            with contextlib.ExitStack() as stack:
                if args.profile is not None and server.process is not None:
                    profile = args.profile.with_name(f"{args.profile.name}-latency")
                    stack.enter_context(Profiler(server.process.pid, profile))
                lat = sorted(x * 1000 for x in latency(url, "latency", args.rate, args.seconds))
            p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99)]
            print(orjson.dumps({"what": "latency", "rate": args.rate, "p50_ms": round(p50, 3),
                                "p99_ms": round(p99, 3), "max_ms": round(lat[-1], 3)}).decode(), flush=True)
            rows.append(f"| end-to-end latency at {args.rate} msgs/s | 1 | {len(lat):,} | | {p50:.2f} | {p99:.2f} |")
            if args.fanout:
                seconds, cpu = fanout(url, server, args.fanout, args.profile)
                print(orjson.dumps({"what": "fanout", "polls": args.fanout, "ms": round(seconds * 1000, 1),
                                    "server_cpu_s": round(cpu, 3)}).decode(), flush=True)
                rows.append(f"| one publish wakes {args.fanout:,} long polls: last answer after | {args.fanout:,} | 1 "
                            f"| | {seconds * 1000:.0f} | |")
        finally:
            server.stop()
    print("| what | consumers | messages | msgs/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
