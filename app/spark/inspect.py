"""`chunkmq spark inspect`: every record of a data directory's chunk files, read directly.

The broker may be down or its store broken: the files are read through chunkmq.storage.reader, which
opens them read-only and checks every CRC. A chunk is split into pieces of `SPLIT_BYTES` of its data,
one Spark task each, and each task streams its records (the file is mapped, never read whole).
Damaged stretches are rows too (`damaged_bytes` set, `error` saying why), and so is a file whose
header cannot be read: a forensic report shows what was lost and where, and goes on.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chunkmq.spark.session import session

SCHEMA = ("chunk string, position bigint, timestamp timestamp, flags int, "
          "placements array<struct<queue_id:bigint,offset:bigint>>, idempotency_key string, tag string, "
          "data binary, damaged_bytes bigint, exchange string, routing_key string, headers map<string,string>, "
          "body binary, error string")
SPLIT_BYTES = 32 << 20  # data bytes of a chunk per task: a 256 MiB chunk is 8 tasks
DAMAGED = "no valid record"  # the error of a damaged stretch between records

Piece = tuple[str, int, int | None]  # chunk file, [start, end) of its data region (None: to its end)


def store_dir(data_dir: Path) -> Path:
    """The store inside a data directory (or the directory itself if it is a store)."""
    return data_dir / "store" if (data_dir / "store" / "log").is_dir() else data_dir


def pieces(paths: list[str], split_bytes: int = SPLIT_BYTES) -> list[Piece]:
    """Each chunk file as windows of `split_bytes` of its data (read from its header, on the driver).
    A file whose header cannot be read is one piece: its task reports it."""
    from chunkmq.storage.reader import chunk_head

    out: list[Piece] = []
    for path in paths:
        try:
            head = chunk_head(Path(path))
        except (OSError, ValueError):
            out.append((path, 0, None))
            continue
        size = head.data_size if head.sealed_bytes is None else min(head.sealed_bytes, head.data_size)
        starts = range(0, max(size, 1), split_bytes)
        out.extend((path, s, s + split_bytes if s + split_bytes < size else None) for s in starts)
    return out


def _damaged(chunk: str, position: int | None, length: int, error: str) -> tuple[Any, ...]:
    return (chunk, position, None, None, None, None, None, None, length, None, None, None, None, error)


def chunk_rows(piece: Piece) -> Iterator[tuple[Any, ...]]:
    """Rows of one piece of a chunk file, streamed (runs in an executor)."""
    import datetime as dt

    from chunkmq.storage.model import Record
    from chunkmq.storage.reader import read_chunk

    path, start, end = piece
    name = Path(path).name
    items = read_chunk(Path(path), start, end)
    try:
        first = next(items, None)
    except (OSError, ValueError) as e:  # an unreadable header: the whole file is one damaged row
        yield _damaged(name, None, Path(path).stat().st_size, f"unreadable chunk header: {e}")
        return
    if first is None:
        return
    for item in itertools.chain((first,), items):
        if isinstance(item, Record):
            yield (name, item.position, dt.datetime.fromtimestamp(item.timestamp / 1000, dt.UTC), item.flags,
                   [(q, o) for q, o in item.placements], item.idempotency_key.decode(errors="replace") or None,
                   item.tag.decode(errors="replace") or None, item.data, None, *_members(item.data, item.tag), None)
        else:
            yield _damaged(name, item.position, item.length, DAMAGED)


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
    frame.cache()
    summary = frame.selectExpr(
        "count(*) - count(damaged_bytes) as records", "count(damaged_bytes) as damaged",
        "coalesce(sum(damaged_bytes), 0) as damaged_bytes", "count(distinct chunk) as chunks").first()
    assert summary is not None
    damage = frame.where("damaged_bytes is not null").groupBy("chunk").agg(
        {"damaged_bytes": "sum", "error": "first"}).orderBy("chunk").collect()
    from rich.console import Console

    console = Console(stderr=True)
    for row in damage:
        console.print(f"damaged: {row['chunk']}: {row['sum(damaged_bytes)']} bytes ({row['first(error)']})",
                      markup=False)
    console.print(
        f"{summary['chunks']} chunk files: {summary['records']} records, "
        f"{summary['damaged']} damaged stretches ({summary['damaged_bytes']} bytes)"
        + (f"; written to {args.output}" if args.output else ""), markup=False)
    return 0 if summary["damaged"] == 0 else 3


def inspect_frame(spark: Any, paths: list[str], split_bytes: int = SPLIT_BYTES) -> Any:
    """The records of these chunk files, with the message members decoded from `data` (in the tasks):
    one task per `split_bytes` of a chunk's data."""
    parts = pieces(paths, split_bytes)
    rdd = spark.sparkContext.parallelize(parts, len(parts)).flatMap(chunk_rows)
    return spark.createDataFrame(rdd, SCHEMA)
