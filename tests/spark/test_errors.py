"""The Spark connector's errors (app/spark/errors.py): importable without PySpark, the classes the
other modules raise, and a broker answer's status and code kept."""

from __future__ import annotations

import subprocess
import sys

from chunkmq.spark import errors, http, options, reader


def test_the_modules_raise_these_classes() -> None:
    assert http.ChunkmqError is errors.ChunkmqError and options.OptionError is errors.OptionError
    assert reader.DataLoss is errors.DataLoss and reader.ReadFailed is errors.ReadFailed


def test_a_broker_answer_keeps_its_status_and_code() -> None:
    error = errors.ChunkmqError(404, "queue_not_found", "queue 'q' not found")
    assert (error.status, error.code) == (404, "queue_not_found")
    assert str(error) == "chunkmq answered 404 queue_not_found: queue 'q' not found"


def test_importing_them_loads_neither_pyspark_nor_httpx() -> None:
    code = "import sys, chunkmq.spark.errors; print(sorted(m for m in ('pyspark', 'httpx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
