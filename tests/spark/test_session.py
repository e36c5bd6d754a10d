"""Spark Connect: `session("sc://...")` reads and writes format("chunkmq") through a real Spark Connect
server. The server runs in the JVM of the tests' Spark session (a server of its own would cost a
second JVM start); the client is a process of its own that talks to it over gRPC on 127.0.0.1, and
the data source and sink run in the server's Python workers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess
from tests.spark.conftest import bodies, fill


@pytest.fixture
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


def test_read_and_write_over_spark_connect(
    connect: str, broker: ServerProcess, api: httpx.Client, name: str
) -> None:
    fill(api, f"{name}-in", 300, routing_key="r")
    api.put(f"/api/v1/exchanges/{name}-x", json={"type": "fanout"}).raise_for_status()
    api.put(f"/api/v1/queues/{name}").raise_for_status()
    api.post("/api/v1/bindings", json={"exchange": f"{name}-x", "queue": name}).raise_for_status()
    job = subprocess.run(
        [sys.executable, "-m", "tests.spark.connect_job", connect, broker.url, f"{name}-in", "100", f"{name}-x"],
        capture_output=True, text=True, timeout=300,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    # a Connect client (no JVM in the job's process), and every message read and written once
    assert job.stdout.split() == ["pyspark.sql.connect.session.SparkSession"]
    assert sorted(bodies(api, name)) == sorted(f"{i} M{i} r" for i in range(100, 300))
