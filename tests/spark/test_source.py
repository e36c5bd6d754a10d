"""The source and sink in executors that are processes of their own (local-cluster), and a driver
killed mid-stream that a new driver resumes from the checkpoint with no duplicate and no gap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.server import ServerProcess
from tests.spark.conftest import bodies, fill


def test_cluster_driver_killed_mid_stream_then_resumed(
    spark: Any, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    fill(api, f"{name}-in", 3000, routing_key=name)
    api.put(f"/api/v1/exchanges/{name}-x", json={"type": "fanout"}).raise_for_status()
    api.put(f"/api/v1/queues/{name}").raise_for_status()
    api.post("/api/v1/bindings", json={"exchange": f"{name}-x", "queue": name}).raise_for_status()
    checkpoint, pids = tmp_path / "cp", tmp_path / "pids"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.cluster_job", broker.url, f"{name}-in", f"{name}-x", str(checkpoint),
         "local-cluster[2,1,1024]", str(pids)],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            done = list((checkpoint / "commits").glob("[0-9]*")) if (checkpoint / "commits").is_dir() else []
            if len(done) >= 2:
                break
            time.sleep(0.2)
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        assert len(list((checkpoint / "commits").glob("[0-9]*"))) >= 2, "the stream made no progress in time"
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its local cluster, mid-stream
        driver.wait()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    driver_pid, *executor_pids = map(int, pids.read_text().split())
    assert len(set(executor_pids)) >= 2 and driver_pid not in executor_pids  # tasks ran in other processes
    partial = bodies(api, name)
    assert 600 <= len(partial) < 3000  # killed mid-stream

    # A new driver (this test's local session) resumes from the checkpoint: the batch the kill cut
    # short again as logged (300), then bigger ones (fewer micro-batches to wait for).
    query = (spark.readStream.format("chunkmq").option("url", broker.url).option("subscribe", f"{name}-in")
             .option("maxOffsetsPerTrigger", "1000").load().selectExpr("cast(body as string) as body", "routing_key")
             .writeStream.format("chunkmq").option("url", broker.url).option("exchange", f"{name}-x")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert bodies(api, name) == [f"m{i}" for i in range(3000)]  # no duplicate, no gap, in order
