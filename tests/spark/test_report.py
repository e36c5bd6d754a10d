"""`chunkmq spark report` over an archive and the live queues: Parquet tables and an HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from chunkmq.cli import main as cli
from tests.server import ServerProcess
from tests.spark.conftest import fill
from tests.spark.test_archive import archive


def test_archive_then_report(spark: Any, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path) -> None:
    fill(api, name, 400, routing_key="orders.eu", tag="created")
    assert archive(broker, name, tmp_path) == 0
    fill(api, name, 100, start=400, routing_key="orders.<us>")  # live only, not yet archived
    out = tmp_path / "report"
    for _ in range(2):  # two runs: lag over time has two points
        assert cli(["spark", "report", "--url", broker.url, "--queues", name, "--archive", str(tmp_path / "archive"),
                    "--output", str(out)]) == 0
    per_minute = spark.read.parquet(str(out / "per_minute")).collect()
    assert sum(r.messages for r in per_minute) == 500  # archived and live, each message once
    assert sum(r.bytes for r in per_minute) == sum(len(f"m{i}") for i in range(500))
    keys = {r.value: r["count"] for r in spark.read.parquet(str(out / "routing_keys")).collect()}
    assert keys == {"orders.eu": 400, "orders.<us>": 100}
    assert {r.value: r["count"] for r in spark.read.parquet(str(out / "tags")).collect()} == {"created": 400}
    sizes = {r.up_to_bytes: r["count"] for r in spark.read.parquet(str(out / "sizes")).collect()}
    assert sizes == {2: 10, 4: 490}  # "m0".."m9": 2 bytes; the rest 3 or 4
    lag = spark.read.parquet(str(out / "lag")).where(f"queue = '{name}'").collect()
    assert [(r.group, r.lag) for r in lag] == [("archive", 100), ("archive", 100)]
    page = (out / "report.html").read_text()
    assert "<svg" in page and "orders.&lt;us&gt;" in page and "orders.<us>" not in page
    assert "500 messages in 1 queues" in page
