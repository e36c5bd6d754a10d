"""bench/delay.py: a small run delivers every delayed message and reports its figures."""

from __future__ import annotations

import pytest

from bench import delay


def test_a_small_delay_run_delivers_all_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert delay.main(["--messages", "3000", "--window", "2", "--lead", "3", "--rate-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "3,000 delayed messages of 100 B due over 2 s" in out and "3,000 delivered" in out
    row = next(line for line in out.splitlines() if line.startswith("| lateness into the queue"))
    p50, p99, worst = (float(v) for v in row.split("|")[2].replace("ms", "").split("/"))
    assert 0 <= p50 <= p99 <= worst < 1_000
