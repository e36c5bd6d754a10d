"""`import chunkmq.spark; chunkmq.spark.register(spark)`: the Spark source and sink (docs/spark.md)."""

from app.spark import register

__all__ = ["register"]
