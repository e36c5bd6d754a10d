"""A Spark Connect client of its own for tests/spark/test_session.py (a process holding a regular
Spark session cannot open a Connect one): reads QUEUE from OFFSET through format("chunkmq"), prints
the rows as JSON, and writes their bodies upper-cased into EXCHANGE through the sink.

    python -m tests.spark.connect_job SC_URL BROKER_URL QUEUE OFFSET EXCHANGE
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    remote, url, queue, offset, exchange = sys.argv[1:6]
    from app.spark.session import session

    spark = session(remote, "chunkmq-connect-test")
    df = (spark.read.format("chunkmq").option("url", url).option("subscribe", queue)
          .option("startingOffsets", json.dumps({queue: int(offset)})).option("maxRecordsPerPartition", "100")
          .load())
    rows = df.selectExpr("offset", "cast(body as string) as text", "routing_key").orderBy("offset").collect()
    print(json.dumps({"session": type(spark).__module__, "rows": [list(r) for r in rows]}))
    (df.selectExpr("upper(cast(body as string)) as body")
     .write.format("chunkmq").option("url", url).option("exchange", exchange).mode("append").save())
    spark.stop()


if __name__ == "__main__":
    main()
