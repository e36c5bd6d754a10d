"""The SparkSession the jobs (and the tests) run in."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def session(master: str | None = None, app_name: str = "chunkmq", **conf: str) -> SparkSession:
    """A session with `format("chunkmq")` registered, on ``master`` (default `local[*]`; `sc://...`
    for Spark Connect). Executors run this same Python (they import chunkmq.spark), and a local master
    stays on the loopback interface."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from chunkmq.spark import register

    master = master or "local[*]"
    remote = master.startswith("sc://")
    builder = SparkSession.builder.appName(app_name)
    # sc://host: a Spark Connect server (the data source is registered there through this session)
    builder = builder.remote(master) if remote else builder.master(master)
    # A Connect client can set only runtime settings: the server's own (UI, ...) are its operator's.
    static = {} if remote else {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    settings = {**static, "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4", **conf}
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # also for local-cluster's worker JVMs
        settings.setdefault("spark.driver.host", "127.0.0.1")
        settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
