"""Run `python -m bench` as a real process and read back what it wrote."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]


def run_bench(out: Path, *args: str,
              timeout: float = 240) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = subprocess.run([sys.executable, "-m", "bench", "--out", str(out), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)
    files = sorted(out.glob("bench-*.jsonl"))
    assert files, f"no results written\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    records = [orjson.loads(line) for line in files[-1].read_bytes().splitlines() if line.strip()]
    return proc, records


def samples(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "sample"]


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) != 0
