"""bench/console.py, short: W1 runs with and without console tabs and the quiet-window CPU line."""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.bench.harness import ROOT


def test_console_bench_smoke() -> None:
    proc = subprocess.run(
        # 20,000 messages: the server's CPU is read from /proc in 10 ms ticks, which 2,000 could fall under
        [sys.executable, "-m", "bench.console", "--count", "20000", "--repeats", "1", "--mode", "http",
         "--tabs", "2", "--refresh", "0.2", "--idle-seconds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [orjson.loads(line) for line in proc.stdout.splitlines()]
    runs = [line for line in lines if "run" in line]
    assert sorted(r["tabs"] for r in runs) == [0, 2] and all(r["msgs_per_s"] > 0 for r in runs)
    cpu = next(line for line in lines if "server_cpu_tabs" in line)
    assert cpu["server_cpu_tabs"] > 0 and cpu["console_requests_per_s"] > 0 and "server_cpu_ms_per_request" in cpu
    summary = lines[-1]
    assert summary["median_none"] > 0 and summary["median_tabs"] > 0 and "change_pct" in summary
    assert summary["cpu_us_per_msg_none"] > 0 and summary["cpu_us_per_msg_tabs"] > 0
    assert len(summary["paired_change_range_pct"]) == 2 and "paired_change_pct" in summary
