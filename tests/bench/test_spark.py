"""bench/spark.py runs end to end (in the test run's Spark session) and reports every measurement."""

from __future__ import annotations

from typing import Any

from bench import spark as bench_spark


def test_spark_bench_smoke(spark: Any) -> None:
    results = bench_spark.main(["--smoke"])
    assert [r["what"] for r in results] == ["arrow_page", "read_arrow", "read_json", "write"]
    assert all(r["rows"] > 0 and r["rows_per_s"] > 0 for r in results)
