"""`chunkmq spark inspect`: the chunk files of a data directory read directly, one task per chunk,
while the broker is down, without changing a byte."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx

from chunkmq.cli import main as cli
from chunkmq.spark.inspect import inspect_frame, store_dir
from chunkmq.storage.reader import chunk_paths
from tests.server import ServerProcess


def test_inspect_a_stopped_broker(spark: Any, tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="32768").start()
    try:
        with httpx.Client(base_url=server.url) as api:
            api.put("/api/v1/queues/q").raise_for_status()
            for b in range(4):
                messages = [{"body": f"m{b * 500 + i}", "routing_key": "k", "headers": {"h": "1"}} for i in range(500)]
                api.post("/api/v1/queues/q/publish", json={"messages": messages}).raise_for_status()
            api.post("/api/v1/queues/q/publish", json={"messages": [{"body_base64": "AP8="}]}).raise_for_status()
    finally:
        server.stop()
    paths = chunk_paths(store_dir(tmp_path / "data"))
    assert len(paths) > 2
    before = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    frame = inspect_frame(spark, [str(p) for p in paths])
    assert frame.rdd.getNumPartitions() == len(paths)  # one task per chunk file
    rows = frame.orderBy("position").select("placements", "routing_key", "headers", "body", "damaged_bytes").collect()
    assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(2000)] + [b"\x00\xff"]
    assert rows[7].placements[0].offset == 7 and rows[7].routing_key == "k" and rows[7].headers == {"h": "1"}
    assert all(r.damaged_bytes is None for r in rows)
    out = tmp_path / "inspected"
    assert cli(["spark", "inspect", "--data-dir", str(tmp_path / "data"), "--output", str(out)]) == 0
    assert spark.read.parquet(str(out)).count() == 2001
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths] == before  # read-only
