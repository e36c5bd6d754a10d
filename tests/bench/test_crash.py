"""The kill -9 loop of bench/crash.py, short: with fsync=always nothing acknowledged is lost,
duplicated or delivered again (`python -m bench.crash --cycles 40` is the long run, docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

from bench.crash import main, run


def test_kill_9_loop_under_load_loses_and_repeats_nothing(tmp_path: Path) -> None:
    totals = run(tmp_path, cycles=4, fsync="always", seconds=(0.3, 0.9), seed=3)
    assert totals.problems == []
    assert totals.clean
    assert totals.cycles == 4
    assert totals.published > 0 and totals.acked > 0  # the kills landed under load


def test_the_loop_detects_write_behind_acks(tmp_path: Path) -> None:
    """With fsync=interval acks are written behind: a kill redelivers acked messages, and the loop
    says so (so a clean run with fsync=always means something)."""
    totals = run(tmp_path, cycles=2, fsync="interval", seconds=(0.8, 1.0), seed=5)
    assert totals.acked_redelivered > 0
    assert main(["--cycles", "1", "--fsync", "always", "--workdir", str(tmp_path / "cli")]) == 0
