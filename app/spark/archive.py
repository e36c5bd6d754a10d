"""`chunkmq spark archive`: queues to Parquet partitioned by date, as a Structured Streaming job.

The checkpoint holds the position (exactly once into the Parquet sink, which logs its own commits);
the `--group` consumer group follows it so the console and lag alerts see the archive.
"""

from __future__ import annotations

import argparse

from chunkmq.spark.jobs import source_options
from chunkmq.spark.session import session


def main(args: argparse.Namespace) -> int:
    options = source_options(args)
    spark = session(args.master, "chunkmq-archive")
    from pyspark.sql import functions as F

    reader = spark.readStream.format("chunkmq").options(**options)
    reader = reader.option("startingOffsets", args.starting_offsets).option("group", args.group)
    if args.max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    frame = reader.load().withColumn("date", F.to_date("timestamp"))
    writer = (frame.writeStream.format("parquet").partitionBy("date")
              .option("checkpointLocation", args.checkpoint).option("path", args.output))
    if args.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.interval} seconds")
    query = writer.start()
    query.awaitTermination()
    rows = sum(p.numInputRows for p in query.recentProgress)  # the source moved the group along
    print(f"archived {rows} messages to {args.output}")
    return 0
