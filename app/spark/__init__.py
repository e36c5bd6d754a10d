"""Spark connector and jobs: `format("chunkmq")` to read queues and write to exchanges, and the
`chunkmq spark archive|report|inspect` jobs (docs/spark.md).

It talks to the broker only over the public HTTP API, and reads chunk files only through the
read-only reader of app.storage. PySpark is imported when `register` is called, not on import of
this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("chunkmq")` available in this session."""
    from app.spark.source import ChunkmqDataSource

    spark.dataSource.register(ChunkmqDataSource)
