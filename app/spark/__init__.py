"""Spark connector and jobs: `format("chunkmq")` to read queues and write to exchanges, and the
`chunkmq spark archive|report|inspect` jobs (docs/spark.md).

`import chunkmq.spark` registers the data source with the active Spark session, if there is one;
`chunkmq.spark.register(spark)` does it for any session.

It talks to the broker only over the public HTTP API, and reads chunk files only through the
read-only reader of chunkmq.storage. Importing this package does not import PySpark: a program
that has a session has imported it already.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("chunkmq")` available in this session."""
    from chunkmq.spark.source import ChunkmqDataSource

    spark.dataSource.register(ChunkmqDataSource)


def _register_active() -> None:
    sql = sys.modules.get("pyspark.sql")
    active = sql.SparkSession.getActiveSession() if sql is not None else None
    if active is not None:
        register(active)


_register_active()
