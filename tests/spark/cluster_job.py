"""A Spark driver of its own for tests/spark/test_source.py: streams a queue into an exchange through
format("chunkmq") on the given master, forever (the test kills it).

    python -m tests.spark.cluster_job URL QUEUE EXCHANGE CHECKPOINT MASTER PIDS_FILE
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    url, queue, exchange, checkpoint, master, pids_file = sys.argv[1:7]
    from chunkmq.spark.session import session
    from tests.spark import SPARK_TEST_CONF

    spark = session(master, "chunkmq-cluster-test", **SPARK_TEST_CONF)
    pids = spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getpid()).distinct().collect()
    with open(pids_file, "w") as f:
        f.write(" ".join(map(str, [os.getpid(), *pids])))
    query = (spark.readStream.format("chunkmq").option("url", url).option("subscribe", queue)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300").load()
             .selectExpr("cast(body as string) as body", "routing_key")
             .writeStream.format("chunkmq").option("url", url).option("exchange", exchange)
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
