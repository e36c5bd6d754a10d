"""Spark connector throughput: batch read rows/s over JSON pages vs Arrow pages, and sink rows/s.

    .venv/bin/python -m bench.spark [--count 2000000] [--master local[*]] [--only read_arrow] [--repeat 3] [--smoke]

Starts a chunkmq server (auth off, 127.0.0.1, fsync=interval), fills a queue with --count messages
of 100 bytes, then measures in one Spark session:
- arrow_page: the server alone, Arrow pages of 10,000 fetched in a loop by one client (no Spark);
- read_arrow: `spark.read.format("chunkmq")` into Spark's `noop` sink (every column materialised);
- read_json: the same reads through a data source that yields tuples parsed from the JSON pages
  (`bench_chunkmq_json`, defined here: what a source without the Arrow endpoint would do);
- write: a DataFrame of --count/4 text bodies into an exchange (`format("chunkmq")`, 1,000 per request).
Prints one JSON line per measurement: wall time, and the CPU seconds of the broker, the Spark JVM,
its Python workers and this driver process (`cpu_s`), with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from bench.peers.chunkmq import ChunkmqServer

JSON = {"content-type": "application/json"}


class Cpu:
    """CPU seconds (user + system) per process group of a local Spark run: the broker's tree, the
    Spark JVMs (java processes under this one), their Python workers (the pyspark daemon and its
    forks, with the children they reaped) and this driver process. Wall time is what other load on
    a shared machine inflates; these are not."""

    def __init__(self, server_cpu: Callable[[], float]) -> None:
        self.server_cpu = server_cpu

    def snapshot(self) -> dict[str, float]:
        jvm = workers = 0.0
        for p in psutil.Process().children(recursive=True):
            try:
                if p.name() != "java":
                    continue
                t = p.cpu_times()
                jvm += t.user + t.system
                workers += t.children_user + t.children_system  # the Python workers it reaped
                for w in p.children(recursive=True):
                    u = w.cpu_times()
                    workers += u.user + u.system + u.children_user + u.children_system
            except psutil.NoSuchProcess:  # zombies still answer: only reaped ones are gone (and counted above)
                pass
        return {"server": self.server_cpu(), "jvm": jvm, "python_workers": workers, "driver": time.process_time()}

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: round(after[k] - before[k], 3) for k in before}


def fill(url: str, queue: str, count: int) -> None:
    body = orjson.dumps({"messages": [{"body": "x" * 100} for _ in range(1000)]})
    with httpx.Client(base_url=url, timeout=60) as client:
        client.put(f"/api/v1/queues/{queue}", json={}).raise_for_status()
        for _ in range(count // 1000):
            client.post(f"/api/v1/queues/{queue}/publish", content=body, headers=JSON).raise_for_status()


def arrow_pages(url: str, queue: str, count: int) -> float:
    """Seconds for one client to fetch the queue as Arrow pages (the server's share of a read)."""
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as client:
        offset = 0
        while offset < count:
            r = client.get(f"/api/v1/queues/{queue}/messages",
                           params={"offset": offset, "limit": 10_000, "format": "arrow"})
            offset = int(r.headers["x-next-offset"])
    return time.perf_counter() - started


def json_source() -> type:
    """A data source reading the JSON browse pages and yielding tuples (for comparison only)."""
    from chunkmq.spark.reader import BatchReader, QueueRange
    from chunkmq.spark.source import ChunkmqDataSource

    class JsonReader(BatchReader):
        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
            assert isinstance(partition, QueueRange)
            offset = partition.start
            with httpx.Client(base_url=self.opts.url, timeout=60) as client:
                while offset < partition.end:
                    page = orjson.loads(client.get(
                        f"/api/v1/queues/{partition.queue}/messages",
                        params={"offset": offset, "limit": min(10_000, partition.end - offset)}).content)
                    for m in page["messages"]:
                        body = m["body"].encode() if "body" in m else base64.b64decode(m["body_base64"])
                        at = dt.datetime.fromtimestamp(m["timestamp"] / 1000, dt.UTC)
                        yield (m["queue"], m["offset"], m["id"], at,
                               m["exchange"], m["routing_key"], m["tag"], m["headers"], body)
                    if not page["messages"]:
                        return
                    offset = page["next_offset"]

    class JsonSource(ChunkmqDataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_chunkmq_json"

        def reader(self, schema: Any) -> JsonReader:
            return JsonReader(super().reader(schema).opts)  # type: ignore[attr-defined]

    return JsonSource


ALL = ("arrow_page", "read_arrow", "read_json", "write")


def run(spark: Any, url: str, count: int, server_cpu: Callable[[], float] = lambda: 0.0,
        only: tuple[str, ...] = ALL, repeat: int = 1) -> list[dict[str, Any]]:
    """Every measurement in ``only`` (reads ``repeat`` times each), with the CPU seconds of each
    process group (Cpu): figures that other load on the machine does not inflate as it does wall time."""
    results: list[dict[str, Any]] = []
    meter = Cpu(server_cpu)
    cpu_before = [meter.snapshot()]

    def record(what: str, rows: int, seconds: float) -> None:
        cpu = Cpu.spent(cpu_before[0], meter.snapshot())
        line = {"what": what, "rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
                "server_cpu_s": cpu["server"],
                "rows_per_server_cpu_s": round(rows / cpu["server"]) if cpu["server"] > 0 else None,
                "cpu_s": cpu, "load_avg_1m": round(os.getloadavg()[0], 2)}
        print(orjson.dumps(line).decode(), flush=True)
        results.append(line)

    fill(url, "bench", count)
    for _ in range(repeat if "arrow_page" in only else 0):
        cpu_before[0] = meter.snapshot()
        record("arrow_page", count, arrow_pages(url, "bench", count))
    spark.dataSource.register(json_source())
    parts = str(spark.sparkContext.defaultParallelism)
    for what, fmt in (("read_arrow", "chunkmq"), ("read_json", "bench_chunkmq_json")):
        if what not in only:
            continue
        df = (spark.read.format(fmt).option("url", url).option("subscribe", "bench")
              .option("minPartitions", parts).load())
        df.write.format("noop").mode("overwrite").save()  # warm: every Python worker started, the JVM's JIT done
        for _ in range(repeat):
            cpu_before[0] = meter.snapshot()
            started = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            record(what, count, time.perf_counter() - started)
    if "write" in only:
        write(spark, url, max(count // 4, 1000), int(parts), meter, cpu_before, record)
    return results


def write(spark: Any, url: str, rows: int, parts: int, meter: Cpu, cpu_before: list[dict[str, float]],
          record: Callable[[str, int, float], None]) -> None:
    httpx.put(f"{url}/api/v1/queues/sink", json={}).raise_for_status()
    df = spark.range(rows, numPartitions=parts).selectExpr("repeat('y', 100) as body", "'sink' as routing_key").cache()
    df.count()
    cpu_before[0] = meter.snapshot()
    started = time.perf_counter()
    df.write.format("chunkmq").option("url", url).option("exchange", "amq.default").mode("append").save()
    record("write", rows, time.perf_counter() - started)
    written = httpx.get(f"{url}/api/v1/queues/sink").json()["messages"]
    assert written == rows, f"the sink stored {written} of {rows} messages"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--master", default=None)
    parser.add_argument("--smoke", action="store_true", help="4,000 messages: checks that it runs")
    parser.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
    parser.add_argument("--repeat", type=int, default=1, help="run each read this many times (paired runs)")
    args = parser.parse_args(argv)
    from chunkmq.spark.session import session

    spark = session(args.master, "chunkmq-bench")
    with tempfile.TemporaryDirectory(prefix="chunkmq-bench-spark-") as tmp:
        server = ChunkmqServer(Path(tmp), auth="off")
        server.start()
        try:
            only = tuple(w for w in args.only.split(",") if w in ALL)
            return run(spark, f"http://127.0.0.1:{server.port}", 4_000 if args.smoke else args.count,
                       server.cpu_seconds, only, args.repeat)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
