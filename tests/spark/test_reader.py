"""format("chunkmq") reads: batch ranges, timestamps, streams with admission control, data loss."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chunkmq.spark.http import ARROW_PAGE
from chunkmq.spark.options import SourceOptions
from chunkmq.spark.reader import TASK_ROWS, QueueRange, ReadFailed, cores, plan, read_range
from tests.server import ServerProcess
from tests.spark.conftest import fill


def _read(spark: Any, broker: ServerProcess, **options: str) -> Any:
    return spark.read.format("chunkmq").option("url", broker.url).options(**options).load()


def test_batch_read_with_offsets(spark: Any, broker: ServerProcess, api: httpx.Client, name: str) -> None:
    fill(api, name, 2500, routing_key="k", tag="t")
    df = _read(spark, broker, subscribe=name, startingOffsets=f'{{"{name}": 100}}',
               endingOffsets=f'{{"{name}": 2100}}', maxRecordsPerPartition="700")
    assert df.rdd.getNumPartitions() == 3  # 2000 offsets in pieces of at most 700
    rows = df.selectExpr("offset", "cast(body as string) as text", "routing_key", "tag", "exchange", "id",
                         "headers", "queue").orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(100, 2100))
    assert [r.text for r in rows] == [f"m{i}" for i in range(100, 2100)]
    first = rows[0]
    assert (first.queue, first.exchange, first.routing_key, first.tag, first.headers) == (name, "", "k", "t", {})
    [at_100] = api.get(f"/api/v1/queues/{name}/messages", params={"offset": 100, "limit": 1}).json()["messages"]
    assert first.id == at_100["id"]
    # the defaults: everything from earliest to latest, split into minPartitions
    df = _read(spark, broker, subscribe=name, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4 and df.count() == 2500


def test_batch_read_with_timestamps(spark: Any, broker: ServerProcess, api: httpx.Client, name: str) -> None:
    fill(api, name, 50)
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    fill(api, name, 30, start=50)
    df = _read(spark, broker, subscribe=name, startingTimestamp=str(middle))
    rows = df.selectExpr("offset", "timestamp").collect()
    assert sorted(r.offset for r in rows) == list(range(50, 80))
    assert all(r.timestamp.timestamp() * 1000 >= middle for r in rows)


def test_text_bodies_binary_headers_and_pattern(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str
) -> None:
    api.put(f"/api/v1/queues/{name}-a")
    api.put(f"/api/v1/queues/{name}-b")
    messages = [{"body": 'quote " and \\ and ünï', "headers": {"h": "v"}}, {"body_base64": "AAEC/w=="}]
    api.post(f"/api/v1/queues/{name}-a/publish", json={"messages": messages}).raise_for_status()
    api.post(f"/api/v1/queues/{name}-b/publish", json={"messages": [{"body": "b"}]}).raise_for_status()
    rows = (_read(spark, broker, subscribePattern=f"{name}-[ab]")
            .selectExpr("queue", "offset", "body", "cast(body as string) as text", "headers")
            .orderBy("queue", "offset").collect())
    assert [(r.queue, r.offset) for r in rows] == [(f"{name}-a", 0), (f"{name}-a", 1), (f"{name}-b", 0)]
    assert rows[0].text == 'quote " and \\ and ünï' and rows[0].headers == {"h": "v"}
    assert bytes(rows[1].body) == b"\x00\x01\x02\xff"
    without = _read(spark, broker, subscribe=f"{name}-b", includeHeaders="false")
    assert "headers" not in without.columns and without.count() == 1


def test_stream_micro_batches_with_max_offsets_per_trigger(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    fill(api, name, 350)
    batches: list[list[int]] = []
    query = (spark.readStream.format("chunkmq").option("url", broker.url).option("subscribe", name)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").option("group", "job")
             .load().writeStream.trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .foreachBatch(lambda df, _: batches.append(sorted(r.offset for r in df.select("offset").collect())))
             .start())
    query.awaitTermination(120)
    sizes = [len(b) for b in batches if b]
    assert sizes == [100, 100, 100, 50]
    assert sorted(o for b in batches for o in b) == list(range(350))
    # The group follows the query's committed position, the last batch's included: a finished
    # query leaves no lag for the lag and stalled alerts to fire on.
    group = api.get(f"/api/v1/queues/{name}/groups/job").json()
    assert (group["next_offset"], group["lag"]) == (350, 0)
    # more data, the same checkpoint: only the new messages
    fill(api, name, 20, start=350)
    batches.clear()
    query = (spark.readStream.format("chunkmq").option("url", broker.url).option("subscribe", name)
             .option("group", "job").load().writeStream.trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .foreachBatch(lambda df, _: batches.append(sorted(r.offset for r in df.select("offset").collect())))
             .start())
    query.awaitTermination(120)
    assert [o for b in batches for o in b] == list(range(350, 370))
    group = api.get(f"/api/v1/queues/{name}/groups/job").json()
    assert (group["next_offset"], group["lag"]) == (370, 0)


@pytest.mark.parametrize("fail", [True, False])
def test_data_loss(spark: Any, broker: ServerProcess, api: httpx.Client, name: str, fail: bool) -> None:
    fill(api, name, 100)
    assert api.post(f"/api/v1/queues/{name}/purge").json()["purged"] == 100
    fill(api, name, 10, start=100)
    df = _read(spark, broker, subscribe=name, startingOffsets=f'{{"{name}": 50}}', failOnDataLoss=str(fail).lower())
    if fail:
        from pyspark.errors import AnalysisException

        with pytest.raises(AnalysisException, match="are gone"):
            df.collect()
    else:
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100, 110))


def test_bad_options_are_clear_errors(spark: Any, broker: ServerProcess, name: str) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="subscribe"):
        _read(spark, broker).collect()
    with pytest.raises(AnalysisException, match="no queue named"):
        _read(spark, broker, subscribe=f"{name}-missing").collect()


def test_a_broker_killed_mid_read_is_an_error_naming_broker_queue_and_offsets(tmp_path: Path, name: str) -> None:
    """A read task's pages come from a thread; the broker dies between two of them."""
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            fill(api, name, 6 * ARROW_PAGE, batch=5000)
        opts = SourceOptions.parse({"url": server.url, "subscribe": name}, streaming=False)
        batches = read_range(opts, QueueRange(name, 0, 6 * ARROW_PAGE))
        first = next(batches)
        server.kill()  # the prefetch thread is at most a few pages ahead
        with pytest.raises(ReadFailed) as failed:
            for _ in batches:
                pass
        assert str(failed.value).startswith(
            f"reading queue '{name}' offsets 0..{6 * ARROW_PAGE - 1} from the broker at {server.url} failed at offset ")
        assert first.num_rows > 0
    finally:
        server.kill()


def test_a_broker_gone_after_planning_fails_the_job_naming_broker_queue_and_offsets(
    spark: Any, tmp_path: Path, name: str
) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            fill(api, name, 1000)
        rdd = _read(spark, server, subscribe=name, minPartitions="1").rdd
        assert rdd.getNumPartitions() == 1  # planned with the broker up
        server.kill()
        from pyspark.errors import PythonException  # a task's error, raised in the Python worker

        with pytest.raises(PythonException) as failed:
            rdd.count()
        assert (f"ReadFailed: reading queue '{name}' offsets 0..999 from the broker at {server.url} failed at "
                f"offset 0: ConnectionRefusedError") in str(failed.value)
    finally:
        server.kill()


def test_plan_splits_across_the_cores_in_tasks_of_at_least_task_rows() -> None:
    big = {"q": (0, 10 * TASK_ROWS)}
    assert len(plan(big, None, 10**9)) == cores()
    assert len(plan({"q": (0, TASK_ROWS + 1)}, None, 10**9)) == 1  # too small to split
    assert len(plan(big, 3, 10**9)) == 3  # minPartitions, when given, decides
    parts = plan({"a": (0, 2 * TASK_ROWS), "b": (5, 6)}, None, TASK_ROWS)
    assert [(p.queue, p.start, p.end) for p in parts][-1] == ("b", 5, 6)
    assert sum(p.end - p.start for p in parts) == 2 * TASK_ROWS + 1
