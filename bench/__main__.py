"""`python -m bench`: the side-by-side benchmark (every peer, the table of docs/benchmarks.md, about 15
minutes on 2 cores). `--smoke` is the tiny chunkmq-only run `make test` uses."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import machine, report
from bench.config import ALL_PEERS, ALL_WORKLOADS, DEFAULT_WORKLOADS, Config
from bench.runner import run


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--peers", type=_csv, default=list(ALL_PEERS), help=f"comma list of {','.join(ALL_PEERS)}")
    p.add_argument("--workloads", type=_csv, default=list(DEFAULT_WORKLOADS),
                   help=f"comma list of {','.join(ALL_WORKLOADS)} (default {','.join(DEFAULT_WORKLOADS)}); "
                        "B = publish in batches of 1,000 and read back, D = W1 + W2 with fsync before ack")
    p.add_argument("--count", type=int, default=300_000,
                   help="W1/W2/B messages (W3 count/5, D count/5, W7 count/100)")
    p.add_argument("--backlog", type=int, default=100_000, help="W5/W6: messages in the backlog a restart meets")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="a produce phase stops after this long if --count is not reached yet (0 = never); "
                        "the rate is what was produced over the time it took, and the consume that follows "
                        "moves exactly that")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--latency-rate", type=int, default=2000, help="W4 messages per second")
    p.add_argument("--latency-seconds", type=float, default=10.0)
    p.add_argument("--w8-conns", type=int, default=8, help="W8 connections, one request in flight on each")
    p.add_argument("--w8-seconds", type=float, default=5.0, help="W8 seconds per measurement")
    p.add_argument("--batch", type=int, default=100, help="messages per confirmed produce call")
    p.add_argument("--pull", type=int, default=1000, help="messages per pull / prefetch window")
    p.add_argument("--fsync", choices=["interval", "always", "never"], default="interval",
                   help="durability class of every workload but D: chunkmq's fsync mode (interval = every "
                        "100 ms, closest to the peers' defaults; always = the fsync-before-ack class, as D: "
                        "Redis appendfsync always, NATS sync_interval always, RabbitMQ quorum queues)")
    p.add_argument("--timeout", type=float, default=1800.0, help="upper bound of one phase, seconds")
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--profile", action="store_true", help="py-spy the chunkmq server during W1, W2, W4 and B")
    p.add_argument("--smoke", action="store_true", help="tiny counts, chunkmq only, one repeat")
    a = p.parse_args(argv)
    if a.smoke:
        return Config.smoke_config(a.out)
    unknown = set(a.workloads) - set(ALL_WORKLOADS)
    if unknown:
        p.error(f"unknown workloads {sorted(unknown)}")
    return Config(peers=a.peers, workloads=a.workloads, count=a.count, repeat=a.repeat,
                  latency_rate=a.latency_rate, latency_seconds=a.latency_seconds, batch=a.batch,
                  pull=a.pull, backlog=a.backlog, max_seconds=a.max_seconds, fsync=a.fsync, timeout=a.timeout,
                  out_dir=a.out, profile=a.profile, w8_conns=a.w8_conns, w8_seconds=a.w8_seconds)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # SIGTERM unwinds like Ctrl-C, so every server and client process we started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cfg = parse(args)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jsonl, md = cfg.out_dir / f"bench-{stamp}.jsonl", cfg.out_dir / f"bench-{stamp}.md"
    meta = {"type": "meta", "command": shlex.join(["python", "-m", "bench", *args]),
            "started": stamp, "machine": machine.describe(Path(tempfile.gettempdir())),
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(cfg).items()}}
    with open(jsonl, "wb") as out:
        out.write(orjson.dumps(meta) + b"\n")
        try:
            run(cfg, out)
        except KeyboardInterrupt:  # every started process is stopped by now (finally blocks)
            print(f"interrupted; partial results in {jsonl}", file=sys.stderr)
            return 130
    records = [orjson.loads(line) for line in jsonl.read_bytes().splitlines() if line.strip()]
    text = report.render(records)
    md.write_text(text)
    print(text)  # the ratios are the last lines, as the issue asks
    print(f"results: {jsonl} and {md}", file=sys.stderr)
    failed = [r for r in records if r.get("type") == "sample" and r.get("error")]
    return 1 if failed and cfg.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
