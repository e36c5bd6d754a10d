"""bench/delay.py: a small run delivers every delayed message and reports its figures."""

from __future__ import annotations

import time

import pytest

from bench import delay


def test_a_small_delay_run_delivers_all_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert delay.main(["--messages", "3000", "--window", "2", "--lead", "3", "--rate-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "3,000 delayed messages of 100 B due over 2 s" in out and "3,000 delivered" in out
    row = next(line for line in out.splitlines() if line.startswith("| lateness into the queue"))
    p50, p99, worst = (float(v) for v in row.split("|")[2].replace("ms", "").split("/"))
    assert 0 <= p50 <= p99 <= worst < 1_000


def test_a_control_run_consumes_undelayed_messages_at_their_pace(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert delay.main(["--control", "--messages", "3000", "--window", "2", "--lead", "3", "--rate-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "3,000 undelayed messages (control) consumed as if due over 2 s" in out and "3,000 delivered" in out
    assert time.monotonic() - started >= 5  # the consumer waited for the pace: the lead, then the window
    row = next(line for line in out.splitlines() if line.startswith("| lateness to the consumer"))
    p50, _, _ = (float(v) for v in row.split("|")[2].replace("ms", "").split("/"))
    assert 0 <= p50 < 1_000  # taken at (or just after) the time each would have been due
