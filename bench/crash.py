"""Kill -9 loop under load: nothing acknowledged is lost, duplicated, or delivered again.

    python -m bench.crash --cycles 40 [--fsync always] [--seconds 0.4,1.2]

Each cycle starts `chunkmq serve` on the same data directory, runs publishers and consumers against
it, kills it with SIGKILL at a random moment, restarts it and checks:

- lost: a message whose publish was answered 200 is not in the queue;
- duplicated: a message body appears twice in the queue (publishes are never retried here);
- acked redelivered: a message whose ack was answered 200 is delivered again after the restart;
- skipped: an offset that is neither delivered after the restart nor named in an ack request (an
  ack the server applied and the crash kept it from answering is done, not skipped).

Consumers ack by offset and out of order (two consumers share a group), so the check covers acks
above the ack floor. After the check the group is drained, and the next cycle publishes anew.
With `--fsync always` every count must be 0; with `interval` acked messages may be redelivered (and
published ones lost) up to what the last second held.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

QUEUE = "crash"
GROUP = "g"


@dataclass
class Totals:
    cycles: int = 0
    published: int = 0  # messages whose publish was answered
    acked: int = 0  # messages whose ack was answered
    lost: int = 0
    duplicated: int = 0
    acked_redelivered: int = 0
    skipped: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.acked_redelivered or self.skipped)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, data_dir: Path, fsync: str) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / "crash-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "CHUNKMQ_AUTH": "off", "CHUNKMQ_LOG_LEVEL": "warning", "CHUNKMQ_CHUNK_SIZE": "1048576"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(self.port),
                 "--data-dir", str(self.data_dir), "--fsync", self.fsync],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not start; see {self.log}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _publisher(url: str, worker: int, cycle: int, published: list[str], stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=10) as api:
        n = 0
        while not stop.is_set():
            bodies = [f"c{cycle}-w{worker}-{n}-{j}" for j in range(20)]
            try:
                r = api.post("/api/v1/queues/crash/publish", json={"messages": [{"body": b} for b in bodies]})
            except httpx.HTTPError:
                return  # the server died under us: this batch was never acknowledged
            if r.status_code != 200:
                return
            published.extend(bodies)
            n += 1


def _consumer(url: str, name: str, seed: int, acked: list[int], sent: list[int], stop: threading.Event) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=10) as api:
        while not stop.is_set():
            try:
                r = api.post(f"/api/v1/queues/{QUEUE}/groups/{GROUP}/pull",
                             json={"max_messages": 50, "consumer": name, "wait_ms": 100})
                if r.status_code != 200:
                    return
                offsets = [m["offset"] for m in r.json()["messages"]]
                rng.shuffle(offsets)  # acks above the floor, out of order
                while offsets:
                    cut = rng.randint(1, 20)
                    part, offsets = offsets[:cut], offsets[cut:]
                    sent.extend(part)  # may be done even if the answer never comes
                    a = api.post(f"/api/v1/queues/{QUEUE}/groups/{GROUP}/ack", json={"offsets": part})
                    if a.status_code != 200:
                        return
                    acked.extend(part)  # answered: must never be delivered again
            except httpx.HTTPError:
                return


def _browse_all(api: httpx.Client) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    offset = 0
    while True:
        page = api.get(f"/api/v1/queues/{QUEUE}/messages", params={"offset": offset, "limit": 1000}).json()
        out.extend(page["messages"])
        if not page["messages"]:
            return out
        offset = page["next_offset"]


def _drain(api: httpx.Client) -> list[int]:
    seen: list[int] = []
    while True:
        r = api.post(f"/api/v1/queues/{QUEUE}/groups/{GROUP}/pull", json={"max_messages": 1000, "consumer": "check"})
        messages = r.json()["messages"]
        if not messages:
            return seen
        offsets = [m["offset"] for m in messages]
        seen.extend(offsets)
        api.post(f"/api/v1/queues/{QUEUE}/groups/{GROUP}/ack", json={"offsets": offsets}).raise_for_status()


def run(workdir: Path, cycles: int, fsync: str = "always", seconds: tuple[float, float] = (0.4, 1.2),
        seed: int = 1, progress: bool = False) -> Totals:
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    server = _Server(workdir / "data", fsync)
    totals = Totals()
    started = time.monotonic()
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as api:
        api.put(f"/api/v1/queues/{QUEUE}", json={}).raise_for_status()
        api.put(f"/api/v1/queues/{QUEUE}/groups/{GROUP}", json={}).raise_for_status()
    drained_to = 0  # offsets below were drained and acked by the previous cycles' checks
    seen_bodies: set[str] = set()
    try:
        for cycle in range(cycles):
            published: list[str] = []
            acked: list[int] = []
            sent: list[int] = []
            stop = threading.Event()
            threads = [threading.Thread(target=_publisher, args=(server.url, w, cycle, published, stop))
                       for w in range(2)]
            threads += [threading.Thread(target=_consumer, args=(server.url, f"c{i}", rng.random(), acked, sent, stop))
                        for i in range(2)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(*seconds))
            server.kill()
            stop.set()
            for t in threads:
                t.join(30)
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as api:
                stored = _browse_all(api)
                bodies = [str(m.get("body")) for m in stored if int(m["offset"]) >= drained_to]  # type: ignore[call-overload]
                lost = set(published) - set(bodies)
                duplicated = len(bodies) - len(set(bodies)) + len(set(bodies) & seen_bodies)
                redelivered = _drain(api)
                end = api.get(f"/api/v1/queues/{QUEUE}").json()["next_offset"]
            again = set(redelivered) & set(acked)
            skipped = set(range(drained_to, end)) - set(sent) - set(redelivered)
            totals.cycles += 1
            totals.published += len(published)
            totals.acked += len(acked)
            totals.lost += len(lost)
            totals.duplicated += duplicated
            totals.acked_redelivered += len(again)
            totals.skipped += len(skipped)
            if lost or duplicated or again or skipped:
                totals.problems.append(
                    f"cycle {cycle}: lost {sorted(lost)[:5]}, duplicated {duplicated}, acked redelivered "
                    f"{sorted(again)[:5]}, skipped {sorted(skipped)[:5]}"
                )
            seen_bodies.update(bodies)
            drained_to = end
            if progress:
                print(f"cycle {cycle + 1}/{cycles}: published {len(published)}, acked {len(acked)}, "
                      f"redelivered after restart {len(redelivered)}, problems {len(totals.problems)}", flush=True)
    finally:
        server.stop()
    totals.seconds = round(time.monotonic() - started, 1)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crash", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--fsync", choices=["always", "interval", "never"], default="always")
    parser.add_argument("--seconds", default="0.4,1.2", help="range of load time before each kill")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    low, high = (float(x) for x in args.seconds.split(","))
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chunkmq-crash-") as tmp:
        totals = run(args.workdir or Path(tmp), args.cycles, args.fsync, (low, high), args.seed, progress=True)
    print(f"cycles {totals.cycles}, fsync={args.fsync}, {totals.seconds} s: published {totals.published}, "
          f"acked {totals.acked}; lost {totals.lost}, duplicated {totals.duplicated}, "
          f"acked redelivered {totals.acked_redelivered}, skipped {totals.skipped}")
    for problem in totals.problems:
        print(problem)
    return 0 if totals.clean or args.fsync != "always" else 1


if __name__ == "__main__":
    sys.exit(main())
