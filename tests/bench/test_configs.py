"""`python -m bench.configs` end to end (one short turn), so the docs' command cannot rot."""

from __future__ import annotations

import subprocess
import sys

from tests.bench.harness import ROOT


def test_the_configurations_are_measured_beside_the_floor() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.configs", "--repeat", "1", "--seconds", "1",
                           "--configs", "0,2"], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and " us" in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| defaults (auth on, access log notable)", "| auth off, CHUNKMQ_LOG_LEVEL=warning", "| bare ASGI floor"]
    assert all("x the floor" in row for row in rows[:2])
