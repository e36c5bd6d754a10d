"""`chunkmq spark inspect`: the chunk files of a data directory read directly, in tasks of a piece of
a chunk each, while the broker is down, without changing a byte, damaged files reported."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from chunkmq.cli import main as cli
from chunkmq.spark.inspect import inspect_frame, store_dir
from chunkmq.storage.reader import chunk_paths
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped broker's data directory: 2,001 messages over several 32 KiB chunks."""
    data = tmp_path_factory.mktemp("inspect") / "data"
    server = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="32768").start()
    try:
        with httpx.Client(base_url=server.url) as api:
            api.put("/api/v1/queues/q").raise_for_status()
            for b in range(4):
                messages = [{"body": f"m{b * 500 + i}", "routing_key": "k", "headers": {"h": "1"}} for i in range(500)]
                api.post("/api/v1/queues/q/publish", json={"messages": messages}).raise_for_status()
            api.post("/api/v1/queues/q/publish", json={"messages": [{"body_base64": "AP8="}]}).raise_for_status()
    finally:
        server.stop()
    return data


def test_inspect_a_stopped_broker(spark: Any, data_dir: Path, tmp_path: Path) -> None:
    paths = chunk_paths(store_dir(data_dir))
    assert len(paths) > 2
    before = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    frame = inspect_frame(spark, [str(p) for p in paths])
    assert frame.rdd.getNumPartitions() == len(paths)  # one task per chunk file
    rows = frame.orderBy("position").select("placements", "routing_key", "headers", "body", "damaged_bytes").collect()
    assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(2000)] + [b"\x00\xff"]
    assert rows[7].placements[0].offset == 7 and rows[7].routing_key == "k" and rows[7].headers == {"h": "1"}
    assert all(r.damaged_bytes is None for r in rows)
    out = tmp_path / "inspected"
    assert cli(["spark", "inspect", "--data-dir", str(data_dir), "--output", str(out)]) == 0
    assert spark.read.parquet(str(out)).count() == 2001
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths] == before  # read-only


def test_large_chunks_are_split_into_tasks_that_stream_their_records(spark: Any, data_dir: Path) -> None:
    paths = [str(p) for p in chunk_paths(store_dir(data_dir))]
    whole = inspect_frame(spark, paths).orderBy("position").collect()
    split = inspect_frame(spark, paths, split_bytes=4096)
    assert split.rdd.getNumPartitions() >= 4 * len(paths)  # 32 KiB chunks in 4 KiB pieces
    assert split.orderBy("position").collect() == whole  # no record lost or repeated at the seams


def test_a_chunk_whose_header_cannot_be_read_is_reported_and_the_rest_inspected(
    spark: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    paths = chunk_paths(store_dir(copy))
    victim = paths[1]
    size = victim.stat().st_size
    with open(victim, "r+b") as f:
        f.write(bytes(range(7, 147)))  # 140 bytes of garbage over the header and the first records
    out = tmp_path / "inspected"
    assert cli(["spark", "inspect", "--data-dir", str(copy), "--output", str(out)]) == 3  # damage found
    err = capsys.readouterr().err
    assert f"damaged: {victim.name}: {size} bytes (unreadable chunk header: " in err
    assert f"{len(paths)} chunk files:" in err
    rows = spark.read.parquet(str(out))
    [bad] = rows.where("damaged_bytes is not null").collect()
    assert (bad.chunk, bad.position, bad.damaged_bytes) == (victim.name, None, size)
    assert bad.error.startswith("unreadable chunk header: ")
    others = rows.where(f"chunk != '{victim.name}'").count()
    assert 0 < others < 2001 and rows.count() == others + 1  # every other chunk's records are there
