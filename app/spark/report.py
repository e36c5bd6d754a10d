"""`chunkmq spark report`: traffic of the archive and the live queues, as Parquet tables and an HTML page.

Tables (under --output): per_minute (messages, bytes per queue per minute), sizes (histogram of
body sizes in powers of two), routing_keys and tags (top 20 per queue), lag (each group's lag at
every report run: appended, so charts show it over time).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from chunkmq.spark.charts import bars, lines, page, table
from chunkmq.spark.http import connect
from chunkmq.spark.jobs import source_options
from chunkmq.spark.session import session

SOURCE_COLUMNS = ["queue", "offset", "timestamp", "routing_key", "tag", "body"]


def main(args: argparse.Namespace) -> int:
    options = source_options(args)
    spark = session(args.master, "chunkmq-report")
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out = Path(args.output)
    live = spark.read.format("chunkmq").options(**options).option("includeHeaders", "false").load()
    frame = live.select(*SOURCE_COLUMNS)
    if args.archive:
        archived = spark.read.parquet(args.archive).select(*SOURCE_COLUMNS)
        if args.queues:
            archived = archived.where(F.col("queue").isin(args.queues.split(",")))
        else:
            archived = archived.where(F.col("queue").rlike(f"^(?:{args.pattern})$"))
        frame = archived.unionByName(frame).dropDuplicates(["queue", "offset"])
    frame = frame.withColumn("size", F.length("body")).drop("body").cache()

    per_minute = (frame.groupBy("queue", F.date_trunc("minute", "timestamp").alias("minute"))
                  .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes")).orderBy("queue", "minute"))
    bucket = F.pow(F.lit(2), F.ceil(F.log2(F.greatest(F.col("size"), F.lit(1))))).cast("long")
    sizes = frame.groupBy("queue", bucket.alias("up_to_bytes")).count().orderBy("queue", "up_to_bytes")
    rank = Window.partitionBy("queue").orderBy(F.desc("count"), "value")

    def top(column: str) -> Any:
        counted = frame.where(F.col(column).isNotNull()).groupBy("queue", F.col(column).alias("value")).count()
        return counted.withColumn("rank", F.row_number().over(rank)).where("rank <= 20").orderBy("queue", "rank")

    tables = {"per_minute": per_minute, "sizes": sizes, "routing_keys": top("routing_key"), "tags": top("tag")}
    rows: dict[str, list[Any]] = {}
    for name, df in tables.items():
        df.write.mode("overwrite").parquet(str(out / name))
        rows[name] = spark.read.parquet(str(out / name)).orderBy(*df.columns[:2]).collect()
    frame.unpersist()

    lag = _lag_now(args)
    if lag:
        spark.createDataFrame(lag, "at timestamp, queue string, group string, lag bigint") \
            .write.mode("append").parquet(str(out / "lag"))
    lag_rows = spark.read.parquet(str(out / "lag")).orderBy("at").collect() if (out / "lag").exists() else []

    (out / "report.html").write_text(_html(rows, lag_rows), encoding="utf-8")
    total = sum(r["messages"] for r in rows["per_minute"])
    print(f"report of {total} messages written to {out / 'report.html'}")
    return 0


def _lag_now(args: argparse.Namespace) -> list[tuple[Any, ...]]:
    import datetime as dt
    import re

    now = dt.datetime.fromtimestamp(time.time(), dt.UTC)
    with connect(args.url, args.token) as api:
        queues = api.queues()
    wanted = set(args.queues.split(",")) if args.queues else None
    rx = re.compile(args.pattern) if args.pattern else None
    return [(now, q["name"], g["name"], int(g["lag"])) for q in queues
            if (wanted is None or q["name"] in wanted) and (rx is None or rx.fullmatch(q["name"]))
            for g in q.get("groups", [])]


def _html(rows: dict[str, list[Any]], lag: list[Any]) -> str:
    sections: list[str] = []
    queues = sorted({r["queue"] for r in rows["per_minute"]})
    for q in queues:
        minutes = [r for r in rows["per_minute"] if r["queue"] == q]
        sections.append(f"<h2>{_e(q)}</h2>")
        sections.append(lines("messages per minute", {q: [(r["minute"].timestamp(), r["messages"]) for r in minutes]}))
        sections.append(lines("bytes per minute", {q: [(r["minute"].timestamp(), r["bytes"]) for r in minutes]}))
        sections.append(bars("body sizes (bytes, up to)",
                             [(f"≤{r['up_to_bytes']}", r["count"]) for r in rows["sizes"] if r["queue"] == q]))
        sections.append(table("top routing keys", ["routing key", "messages"],
                              [(r["value"], r["count"]) for r in rows["routing_keys"] if r["queue"] == q]))
        sections.append(table("top tags", ["tag", "messages"],
                              [(r["value"], r["count"]) for r in rows["tags"] if r["queue"] == q]))
    series: dict[str, list[tuple[float, float]]] = {}
    for r in lag:
        series.setdefault(f"{r['queue']} / {r['group']}", []).append((r["at"].timestamp(), r["lag"]))
    if series:
        sections.append("<h2>lag over time (at each report run)</h2>")
        sections.append(lines("lag (messages)", series))
    total = sum(r["messages"] for r in rows["per_minute"])
    return page("chunkmq traffic report", f"{total} messages in {len(queues)} queues", sections)


def _e(text: str) -> str:
    import html

    return html.escape(text)
