"""`python -m bench.delay`: delayed delivery at scale. N delayed messages (100 B) due evenly over a
window; the broker's RSS growth while they wait, their lateness (when each entered its queue, from
its copy's timestamp, and when a consumer received it) at p50/p99/max, and the publish rate of
undelayed traffic beside them against the rate without them.

    python -m bench.delay --messages 1000000 --window 60 [--lead 30] [--rate-seconds 10]

The delayed messages are published first, in batches of 1,000, due from `lead` seconds after the
start; then an undelayed publisher (batches of 100 to another queue) runs for `rate-seconds` before
the first is due (the rate without delayed deliveries) and through the window (the rate beside them),
while a consumer, in a process of its own, long-polls the delayed queue.

`--control` runs the same shape without a delay: the messages are published undelayed, and the
consumer takes them at the pace they would have fallen due. The undelayed publisher's rate beside
that consumer is what delivering the same messages costs without the schedule, so the two runs
together tell the schedule's own cost from the cost of consuming on the same cores.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.peers.process import free_port
from bench.restart import call, ready, spawn

DELAYED, PLAIN, GROUP = "delayed", "plain", "g"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rss_kib(pid: int, field: str = "RssAnon") -> int:
    """The process's resident anonymous memory (its heap: not the log's mapped file pages, which
    the kernel reclaims as it likes) in KiB; `field="VmRSS"` for all of it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


class Publisher(threading.Thread):
    """Undelayed batches of 100 to PLAIN as fast as one connection goes; counts per second."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.stop = port, threading.Event()
        self.sent: list[tuple[float, int]] = []  # (monotonic time, messages) per answered batch

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        body = json.dumps({"messages": [{"body": "x" * 100}] * 100}).encode()
        while not self.stop.is_set():
            conn.request("POST", f"/api/v1/queues/{PLAIN}/publish", body, {"content-type": "application/json"})
            conn.getresponse().read()
            self.sent.append((time.monotonic(), 100))

    def rate(self, start: float, end: float) -> float:
        n = sum(k for t, k in self.sent if start <= t < end)
        return n / max(1e-9, end - start)


def consume(port: int, expected: int, pace: tuple[int, int] | None, out: Any) -> None:
    """Long polls of the delayed queue until `expected` messages came (or `out` is told to stop):
    sends back each message's lateness into the queue and to the consumer. `pace` (first due ms,
    window ms): take message i no sooner than it would have fallen due (the control run)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    entered: list[int] = []
    received: list[int] = []
    while len(received) < expected and not out.poll():
        take = 1000
        if pace is not None:  # no more than have fallen due by now
            first, span = pace
            take = min(1000, (now_ms() - first) * expected // span + 1 - len(received))
            if take <= 0:
                time.sleep(max(0.001, (first + len(received) * span // expected - now_ms()) / 1000))
                continue
        pull = json.dumps({"max_messages": take, "wait_ms": 1000, "consumer": "c"}).encode()
        conn.request("POST", f"/api/v1/queues/{DELAYED}/groups/{GROUP}/pull", pull,
                     {"content-type": "application/json"})
        messages = json.loads(conn.getresponse().read())["messages"]
        got = now_ms()
        for m in messages:
            due = int(m["body"])
            entered.append(m["timestamp"] - due)
            received.append(got - due)
        if messages:
            ack = json.dumps({"up_to": messages[-1]["offset"] + 1}).encode()
            conn.request("POST", f"/api/v1/queues/{DELAYED}/groups/{GROUP}/ack", ack,
                         {"content-type": "application/json"})
            conn.getresponse().read()
    out.send((entered, received))


def _quantiles(values: list[int]) -> tuple[float, float, int]:
    if not values:
        return 0.0, 0.0, 0
    ordered = sorted(values)
    return (statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], ordered[-1])


def run(messages: int, window: float, lead: float, rate_seconds: float, data_dir: Path,
        control: bool = False) -> dict[str, float]:
    port = free_port()
    process = spawn(data_dir, port, "", data_dir.parent / "server.log")
    try:
        process.wait_ready(lambda: ready(port), 120, "chunkmq")
        for queue in (DELAYED, PLAIN):
            call(port, "PUT", f"/api/v1/queues/{queue}", {"max_messages": 2_000_000} if queue == PLAIN else {})
            call(port, "PUT", f"/api/v1/queues/{queue}/groups/{GROUP}", {"start": "earliest"})
        time.sleep(0.5)
        rss_before = rss_kib(process.pid)
        first_due = now_ms() + int(lead * 1000)
        span = int(window * 1000)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        publish_started = time.monotonic()
        for start in range(0, messages, 1000):
            n = min(1000, messages - start)
            dues = [first_due + (start + i) * span // messages for i in range(n)]
            batch = [{"body": str(d)} if control else {"body": str(d), "deliver_at_ms": d} for d in dues]
            conn.request("POST", f"/api/v1/queues/{DELAYED}/publish", json.dumps({"messages": batch}).encode(),
                         {"content-type": "application/json"})
            answer = conn.getresponse()
            raw = answer.read()
            if answer.status >= 300:
                raise RuntimeError(f"publish: {answer.status} {raw[:200]!r}")
        publish_seconds = time.monotonic() - publish_started
        if now_ms() > first_due - rate_seconds * 1000:
            print(f"warning: publishing took {publish_seconds:.1f} s; raise --lead", file=sys.stderr)
        rss_scheduled = rss_kib(process.pid)
        results, out = multiprocessing.Pipe()
        consumer = multiprocessing.Process(
            target=consume, args=(port, messages, (first_due, span) if control else None, out), daemon=True)
        consumer.start()
        publisher = Publisher(port)
        baseline_start = time.monotonic()
        publisher.start()
        time.sleep(max(0.0, (first_due - now_ms()) / 1000))
        baseline_end = window_start = time.monotonic()
        peak = rss_scheduled
        deadline = window_start + window + 30
        while consumer.is_alive() and time.monotonic() < deadline:
            peak = max(peak, rss_kib(process.pid))
            if time.monotonic() >= window_start + window:
                publisher.stop.set()
            time.sleep(0.25)
        window_end = min(time.monotonic(), window_start + window)
        publisher.stop.set()
        publisher.join(30)
        if consumer.is_alive():
            results.send("stop")
        got = results.recv() if results.poll(30) else ([], [])
        consumer.join(30)
        entered, received = _quantiles(got[0]), _quantiles(got[1])
        return {
            "control": control, "messages": messages, "delivered": len(got[1]), "publish_seconds": publish_seconds,
            "rss_before_mib": rss_before / 1024, "rss_scheduled_mib": rss_scheduled / 1024, "rss_peak_mib": peak / 1024,
            "entered_p50": entered[0], "entered_p99": entered[1], "entered_max": entered[2],
            "received_p50": received[0], "received_p99": received[1], "received_max": received[2],
            "rate_without": publisher.rate(baseline_start + 1, baseline_end),
            "rate_beside": publisher.rate(window_start, window_end),
        }
    finally:
        process.stop()


def report(r: dict[str, float], window: float) -> str:
    kind = "undelayed messages (control) consumed as if" if r["control"] else "delayed messages of 100 B"
    return "\n".join([
        f"{int(r['messages']):,} {kind} due over {window:g} s "
        f"(published in {r['publish_seconds']:.1f} s); {int(r['delivered']):,} delivered",
        "",
        "| what | value |",
        "|---|---|",
        f"| broker anonymous RSS before / all scheduled / peak "
        f"| {r['rss_before_mib']:.0f} / {r['rss_scheduled_mib']:.0f} / "
        f"{r['rss_peak_mib']:.0f} MiB |",
        f"| lateness into the queue p50 / p99 / max | {r['entered_p50']:.0f} / {r['entered_p99']:.0f} / "
        f"{r['entered_max']:.0f} ms |",
        f"| lateness to the consumer p50 / p99 / max | {r['received_p50']:.0f} / {r['received_p99']:.0f} / "
        f"{r['received_max']:.0f} ms |",
        f"| undelayed publish rate without / beside them | {r['rate_without']:,.0f} / {r['rate_beside']:,.0f} msgs/s |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.delay", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds the due times spread over")
    parser.add_argument("--lead", type=float, default=40.0, help="seconds from the start to the first due time")
    parser.add_argument("--rate-seconds", type=float, default=10.0,
                        help="the undelayed rate is measured this long before the first is due")
    parser.add_argument("--control", action="store_true",
                        help="publish the messages undelayed and consume them at the pace they would fall due")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-delay-") as tmp:
        result = run(args.messages, args.window, args.lead, args.rate_seconds, Path(tmp) / "data", args.control)
    print(report(result, args.window))
    return 0 if result["delivered"] == result["messages"] else 1


if __name__ == "__main__":
    sys.exit(main())
