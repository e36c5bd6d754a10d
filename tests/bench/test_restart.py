"""bench/restart.py: a store filled, restarted, timed to /readyz and to a message pulled right after."""

from __future__ import annotations

import pytest

from bench import restart


def test_restart_times_a_store_with_a_backlog(capsys: pytest.CaptureFixture[str]) -> None:
    assert restart.main(["--backlog", "1500", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "backlog 1,500 x 100 B, 1 restarts each" in out
    row = next(line for line in out.splitlines() if line.startswith("| installed |"))
    ready, pulled, cpu = (float(cell.split()[0]) for cell in row.strip("|").split("|")[1:])
    assert 0 < ready <= pulled and cpu > 0
