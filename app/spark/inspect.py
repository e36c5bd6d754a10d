"""`chunkmq spark inspect`: every record of a data directory's chunk files, read directly.

The broker may be down or its store broken: the files are read through app.storage.reader, which
opens them read-only and checks every CRC. One Spark task per chunk file. Damaged stretches are rows
too (`damaged_bytes` set), so a forensic report shows what was lost and where.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.spark.session import session

SCHEMA = ("chunk string, position bigint, timestamp timestamp, flags int, "
          "placements array<struct<queue_id:bigint,offset:bigint>>, idempotency_key string, tag string, "
          "data binary, damaged_bytes bigint")
# The broker stores a message's JSON members without braces (exchange, routing_key, headers, tag,
# body or body_base64): the data column is decoded in Spark SQL with this schema.
DATA_SCHEMA = "exchange string, routing_key string, headers map<string,string>, tag string, body string, body_base64 string"


def store_dir(data_dir: Path) -> Path:
    """The store inside a data directory (or the directory itself if it is a store)."""
    return data_dir / "store" if (data_dir / "store" / "log").is_dir() else data_dir


def chunk_rows(path: str) -> Iterator[tuple[Any, ...]]:
    """Rows of one chunk file (runs in an executor)."""
    import datetime as dt

    from app.storage.model import Record
    from app.storage.reader import read_chunk

    name = Path(path).name
    try:
        items = list(read_chunk(Path(path)))
    except (OSError, ValueError) as e:  # an unreadable header: the whole file is one damaged row
        yield (f"{name}: {e}", None, None, None, None, None, None, None, Path(path).stat().st_size)
        return
    for item in items:
        if isinstance(item, Record):
            yield (name, item.position, dt.datetime.fromtimestamp(item.timestamp / 1000, dt.UTC), item.flags,
                   [(q, o) for q, o in item.placements], item.idempotency_key.decode(errors="replace") or None,
                   item.tag.decode(errors="replace") or None, item.data, None)
        else:
            yield (name, item.position, None, None, None, None, None, None, item.length)


def main(args: argparse.Namespace) -> int:
    from app.storage.reader import chunk_paths

    paths = [str(p) for p in chunk_paths(store_dir(Path(args.data_dir)))]
    if not paths:
        raise FileNotFoundError(f"no chunk files under {args.data_dir}")
    spark = session(args.master, "chunkmq-inspect")
    frame = inspect_frame(spark, paths)
    if args.output:
        frame.write.mode("overwrite").parquet(args.output)
        frame = spark.read.parquet(args.output)
    summary = frame.selectExpr(
        "count(position) - count(damaged_bytes) as records", "count(damaged_bytes) as damaged",
        "coalesce(sum(damaged_bytes), 0) as damaged_bytes", "count(distinct chunk) as chunks").first()
    assert summary is not None
    from rich.console import Console

    Console(stderr=True).print(
        f"{summary['chunks']} chunk files: {summary['records']} records, "
        f"{summary['damaged']} damaged stretches ({summary['damaged_bytes']} bytes)"
        + (f"; written to {args.output}" if args.output else ""), markup=False)
    return 0 if summary["damaged"] == 0 else 3


def inspect_frame(spark: Any, paths: list[str]) -> Any:
    """The records of these chunk files, with the message members decoded from `data`."""
    from pyspark.sql import functions as F

    rdd = spark.sparkContext.parallelize(paths, len(paths)).flatMap(chunk_rows)
    frame = spark.createDataFrame(rdd, SCHEMA)
    decoded = F.from_json(F.concat(F.lit("{"), F.col("data").cast("string"), F.lit("}")), DATA_SCHEMA)
    return (frame.withColumn("m", decoded)
            .withColumn("exchange", F.col("m.exchange")).withColumn("routing_key", F.col("m.routing_key"))
            .withColumn("headers", F.col("m.headers"))
            .withColumn("body", F.coalesce(F.unbase64(F.col("m.body_base64")), F.col("m.body").cast("binary")))
            .drop("m"))
