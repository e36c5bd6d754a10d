"""`chunkmq spark archive --once`: queues to Parquet partitioned by date, incrementally, with the
archive's position in its consumer group."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx

from chunkmq.cli import main as cli
from tests.server import ServerProcess
from tests.spark.conftest import fill


def archive(broker: ServerProcess, pattern: str, tmp_path: Path) -> int:
    return cli(["spark", "archive", "--url", broker.url, "--pattern", pattern, "--output", str(tmp_path / "archive"),
                "--checkpoint", str(tmp_path / "cp"), "--once", "--max-per-trigger", "500"])


def test_archive_once_is_incremental(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    fill(api, f"{name}-a", 700, routing_key="r")
    fill(api, f"{name}-b", 300)
    assert archive(broker, f"{name}-.*", tmp_path) == 0
    table = spark.read.parquet(str(tmp_path / "archive"))
    dates = {p.name for p in (tmp_path / "archive").iterdir() if p.name.startswith("date=")}
    assert dates == {f"date={dt.datetime.now(dt.UTC).date()}"}
    rows = table.select("queue", "offset").collect()
    assert sorted((r.queue, r.offset) for r in rows) == sorted(
        [(f"{name}-a", i) for i in range(700)] + [(f"{name}-b", i) for i in range(300)])
    assert api.get(f"/api/v1/queues/{name}-a/groups/archive").json()["next_offset"] == 700
    fill(api, f"{name}-a", 5, start=700)
    assert archive(broker, f"{name}-.*", tmp_path) == 0
    offsets = [r.offset for r in spark.read.parquet(str(tmp_path / "archive")).where(f"queue = '{name}-a'").collect()]
    assert sorted(offsets) == list(range(705))  # only the new ones were added


def test_archive_of_unknown_queue_is_one_line(broker: ServerProcess, tmp_path: Path, capsys: Any) -> None:
    code = cli(["spark", "archive", "--url", broker.url, "--queues", "no-such-queue", "--output", str(tmp_path / "o"),
                "--checkpoint", str(tmp_path / "c"), "--once"])
    assert code == 1 and "no queue named 'no-such-queue'" in capsys.readouterr().err
