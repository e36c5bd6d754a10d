"""bench/gc.py at a tiny scale: every measurement runs and the scenario's ratio holds."""

from __future__ import annotations

import json

import pytest

from bench import gc as bench


def test_gc_benchmark_runs_at_a_tiny_scale(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--scale", "0.02", "--json"])
    data = json.loads(capsys.readouterr().out)
    scenario, cost = data["scenario"], data["cost"]
    assert scenario["log_bytes_after_retention"] == scenario["log_bytes_written"]  # retention alone frees nothing
    assert scenario["sealed_bytes_after_gc"] <= 4 * 4096 + 2 * scenario["sealed_live_bytes"]
    assert scenario["chunk_files_after"] == 2  # one rewritten file and the active chunk
    assert cost["publish_idle_msgs_s"] > 0 and cost["publish_during_gc_msgs_s"] > 0
    assert cost["gc_full_speed_reclaim_mb_s"] > 0 and cost["gc_thread_freed_bytes"] >= 0 and cost["windows"] > 0
