"""`import chunkmq.spark`: the Spark source and sink, `format("chunkmq")` (docs/spark.md).

Importing this module registers the data source with the active Spark session, if there is one;
`chunkmq.spark.register(spark)` does it for any session.
"""

from app.spark import register

__all__ = ["register"]


def _register_active() -> None:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)


_register_active()
