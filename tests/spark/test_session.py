"""Spark Connect: `session("sc://...")` reads and writes format("chunkmq") (batch, and an AvailableNow
stream with a checkpoint) and runs the archive job through a real Spark Connect server. The server
runs in the JVM of the tests' Spark session (a server of its own would cost a second JVM start); the
client is a process of its own that talks to it over gRPC on 127.0.0.1, and the data source and sink
run in the server's Python workers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess
from tests.spark.conftest import bodies, fill


@pytest.fixture(scope="module")
def connect(spark: Any) -> Iterator[str]:
    """A Spark Connect server on a free 127.0.0.1 port; its sc:// URL."""
    sc = spark.sparkContext._jsc.sc()
    sc.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
    sc.conf().set("spark.connect.grpc.binding.port", "0")  # any free port
    service = spark._jvm.org.apache.spark.sql.connect.service
    service.SparkConnectService.start(sc)
    server = getattr(getattr(service, "SparkConnectService$"), "MODULE$")
    try:
        yield f"sc://127.0.0.1:{server.localPort()}"
    finally:
        server.stop(getattr(server, "stop$default$1")(), getattr(server, "stop$default$2")())


def run(*args: str) -> str:
    """A process of its own (a Connect client); its standard output."""
    job = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    return job.stdout


def exchange_into_queue(api: httpx.Client, name: str) -> None:
    api.put(f"/api/v1/exchanges/{name}-x", json={"type": "fanout"}).raise_for_status()
    api.put(f"/api/v1/queues/{name}").raise_for_status()
    api.post("/api/v1/bindings", json={"exchange": f"{name}-x", "queue": name}).raise_for_status()


def test_read_and_write_over_spark_connect(
    connect: str, broker: ServerProcess, api: httpx.Client, name: str
) -> None:
    fill(api, f"{name}-in", 300, routing_key="r")
    exchange_into_queue(api, name)
    out = run("tests.spark.connect_job", connect, broker.url, f"{name}-in", "100", f"{name}-x")
    # a Connect client (no JVM in the job's process), and every message read and written once
    assert out.split() == ["pyspark.sql.connect.session.SparkSession"]
    assert sorted(bodies(api, name)) == sorted(f"{i} M{i} r" for i in range(100, 300))


def test_an_available_now_stream_over_spark_connect_goes_on_from_its_checkpoint(
    connect: str, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    fill(api, f"{name}-in", 150, routing_key="r")
    exchange_into_queue(api, name)
    job = ("tests.spark.connect_job", connect, broker.url, f"{name}-in", "0", f"{name}-x", str(tmp_path / "cp"))
    assert run(*job).split() == ["pyspark.sql.connect.session.SparkSession"]
    assert sorted(bodies(api, name)) == sorted(f"{i} M{i} r" for i in range(150))
    fill(api, f"{name}-in", 50, start=150, routing_key="r")
    run(*job)  # the checkpoint (on the server's side) says where the first run stopped
    assert sorted(bodies(api, name)) == sorted(f"{i} M{i} r" for i in range(200))


def test_the_archive_job_over_spark_connect(
    connect: str, broker: ServerProcess, api: httpx.Client, name: str, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    fill(api, name, 120)
    job = ("chunkmq.cli", "spark", "archive", "--master", connect, "--url", broker.url, "--queues", name,
           "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "cp"), "--once")
    assert run(*job).strip().endswith(f"archived 120 messages to {tmp_path / 'out'}")
    fill(api, name, 30, start=120)
    assert "archived 30 messages" in run(*job)
    table = pq.read_table(tmp_path / "out")
    assert sorted(b.decode() for b in table.column("body").to_pylist()) == sorted(f"m{i}" for i in range(150))
    assert api.get(f"/api/v1/queues/{name}/groups/archive").json()["ack_floor"] == 150
