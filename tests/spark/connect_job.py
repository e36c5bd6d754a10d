"""A Spark Connect client of its own for tests/spark/test_session.py (a process holding a regular
Spark session cannot open a Connect one). Reads QUEUE from OFFSET through format("chunkmq") and
writes "<offset> <BODY upper-cased> <routing key>" for each message into EXCHANGE through the sink;
prints the session's class.

    python -m tests.spark.connect_job SC_URL BROKER_URL QUEUE OFFSET EXCHANGE [CHECKPOINT]

Without CHECKPOINT, in one batch job; with it, as a stream (Trigger.AvailableNow) whose checkpoint
is CHECKPOINT, a path on the Connect server's machine: a second run goes on where the first stopped.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    remote, url, queue, offset, exchange = sys.argv[1:6]
    checkpoint = sys.argv[6] if len(sys.argv) > 6 else None
    from chunkmq.spark.session import session

    spark = session(remote, "chunkmq-connect-test")
    read = spark.readStream if checkpoint else spark.read
    frame = (read.format("chunkmq").option("url", url).option("subscribe", queue)
             .option("startingOffsets", json.dumps({queue: int(offset)})).option("maxRecordsPerPartition", "100")
             .load().selectExpr("format_string('%d %s %s', offset, upper(cast(body as string)), routing_key) as body"))
    if checkpoint:
        (frame.writeStream.format("chunkmq").option("url", url).option("exchange", exchange)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination())
    else:
        frame.write.format("chunkmq").option("url", url).option("exchange", exchange).mode("append").save()
    print(f"{type(spark).__module__}.{type(spark).__name__}")
    spark.stop()


if __name__ == "__main__":
    main()
