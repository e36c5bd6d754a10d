"""`chunkmq spark inspect`: every record of a data directory's chunk files, read directly.

The broker may be down or its store broken: the files are read through chunkmq.storage.reader, which
opens them read-only and checks every CRC. One Spark task per chunk file. Damaged stretches are rows
too (`damaged_bytes` set), so a forensic report shows what was lost and where.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chunkmq.spark.session import session

SCHEMA = ("chunk string, position bigint, timestamp timestamp, flags int, "
          "placements array<struct<queue_id:bigint,offset:bigint>>, idempotency_key string, tag string, "
          "data binary, damaged_bytes bigint, exchange string, routing_key string, headers map<string,string>, "
          "body binary")


def store_dir(data_dir: Path) -> Path:
    """The store inside a data directory (or the directory itself if it is a store)."""
    return data_dir / "store" if (data_dir / "store" / "log").is_dir() else data_dir


def chunk_rows(path: str) -> Iterator[tuple[Any, ...]]:
    """Rows of one chunk file (runs in an executor)."""
    import datetime as dt

    from chunkmq.storage.model import Record
    from chunkmq.storage.reader import read_chunk

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
                   item.tag.decode(errors="replace") or None, item.data, None, *_members(item.data, item.tag))
        else:
            yield (name, item.position, None, None, None, None, None, None, item.length, None, None, None, None)


def _members(data: bytes, tag: bytes) -> tuple[Any, ...]:
    """exchange, routing_key, headers, body of a stored message (message.py, either layout); all None
    for data that is not a broker message."""
    import binascii

    from chunkmq.broker.message import decode_data

    try:
        m = decode_data(data, tag)
        body = binascii.a2b_base64(m["body_base64"]) if "body_base64" in m else m["body"].encode()
        return m["exchange"], m["routing_key"], m["headers"], body
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, None, None, None


def main(args: argparse.Namespace) -> int:
    from chunkmq.storage.reader import chunk_paths

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
    """The records of these chunk files, with the message members decoded from `data` (in the tasks)."""
    rdd = spark.sparkContext.parallelize(paths, len(paths)).flatMap(chunk_rows)
    return spark.createDataFrame(rdd, SCHEMA)
