"""format("chunkmq") writes: batch and streaming, idempotency keys that make a re-run batch a no-op."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess
from tests.spark.conftest import bodies, fill


def _exchange(api: httpx.Client, name: str) -> str:
    """A fanout exchange bound to the queue ``name`` (the sink's target)."""
    api.put(f"/api/v1/exchanges/{name}-x", json={"type": "fanout"}).raise_for_status()
    api.put(f"/api/v1/queues/{name}").raise_for_status()
    api.post("/api/v1/bindings", json={"exchange": f"{name}-x", "queue": name}).raise_for_status()
    return f"{name}-x"


def test_batch_write_text_binary_and_columns(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str
) -> None:
    exchange = _exchange(api, name)
    rows = [(f"t{i}", f"k{i % 3}", {"n": str(i)}, "tag" if i % 2 else None) for i in range(2500)]
    df = spark.createDataFrame(rows, "body string, routing_key string, headers map<string,string>, tag string")
    writer = df.repartition(3).write.format("chunkmq").option("url", broker.url).option("exchange", exchange)
    writer.mode("append").save()
    page = api.get(f"/api/v1/queues/{name}/messages", params={"limit": 10_000}).json()["messages"]
    assert sorted(m["body"] for m in page) == sorted(r[0] for r in rows)  # 3 partitions, batches of 1000
    one = next(m for m in page if m["body"] == "t7")
    assert (one["routing_key"], one["headers"], one["tag"]) == ("k1", {"n": "7"}, "tag")
    spark.createDataFrame([(b"\x00\xff",)], "body binary").write.format("chunkmq").option("url", broker.url) \
        .option("exchange", exchange).mode("append").save()
    last = api.get(f"/api/v1/queues/{name}/messages", params={"offset": 2500}).json()["messages"][0]
    assert last["body_base64"] == "AP8="


def test_stream_write_retried_batch_is_stored_once(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    fill(api, f"{name}-in", 1500)
    exchange = _exchange(api, name)

    def run() -> None:
        query = (spark.readStream.format("chunkmq").option("url", broker.url).option("subscribe", f"{name}-in")
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500").load()
                 .selectExpr("cast(body as string) as body")
                 .writeStream.format("chunkmq").option("url", broker.url).option("exchange", exchange)
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert bodies(api, name) == [f"m{i}" for i in range(1500)]
    # A driver that died after the sink wrote batch 2 but before Spark logged it as committed: Spark
    # runs batch 2 again on restart, with the same query id, batch id and partitions.
    commit = tmp_path / "cp" / "commits" / "2"
    assert commit.exists()
    commit.unlink()
    (tmp_path / "cp" / "commits" / ".2.crc").unlink(missing_ok=True)
    run()
    assert bodies(api, name) == [f"m{i}" for i in range(1500)]  # nothing stored twice
    assert (tmp_path / "cp" / "commits" / "2").exists()  # and the batch did run again


def test_sink_option_errors(spark: Any, broker: ServerProcess) -> None:
    from pyspark.errors import AnalysisException  # refused when the writer is made, before any task

    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(AnalysisException, match="exchange"):
        df.write.format("chunkmq").option("url", broker.url).mode("append").save()
    with pytest.raises(AnalysisException, match="body"):
        no_body = spark.createDataFrame([("x",)], "text string")
        no_body.write.format("chunkmq").option("exchange", "e").mode("append").save()


def test_a_failed_job_run_again_stores_each_row_once_with_an_idempotency_key_column(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str
) -> None:
    from pyspark.errors import AnalysisException, PythonException
    from pyspark.sql import functions as F

    exchange = _exchange(api, name)

    def run(fails: bool) -> None:
        """The job: 2,000 orders; when it `fails`, row 1500 has no body and the task stops there,
        after publishing the first 1,000 (the sink publishes in requests of 1,000)."""
        body = F.when((F.col("id") == 1500) & F.lit(fails), F.lit(None)).otherwise(F.concat(F.lit("m"), "id"))
        rows = spark.range(0, 2000, 1, 1).select(body.alias("body"), F.concat(F.lit("order-"), "id").alias("key"))
        rows.write.format("chunkmq").option("url", broker.url).option("exchange", exchange) \
            .option("idempotencyKeyColumn", "key").mode("append").save()

    with pytest.raises(PythonException, match="the body column holds a null"):  # in the task
        run(fails=True)
    assert bodies(api, name) == [f"m{i}" for i in range(1000)]
    run(fails=False)  # the whole job again: a new write, but the same keys
    assert bodies(api, name) == [f"m{i}" for i in range(2000)]  # each row once
    one = api.get(f"/api/v1/queues/{name}/messages", params={"offset": 0, "limit": 1}).json()["messages"][0]
    assert one["headers"] == {}  # the key column is each message's key, not a part of it
    df = spark.createDataFrame([("x", 1)], "body string, key int")
    with pytest.raises(AnalysisException, match="idempotencyKeyColumn 'key' must name a string column"):
        df.write.format("chunkmq").option("url", broker.url).option("exchange", exchange) \
            .option("idempotencyKeyColumn", "key").mode("append").save()
