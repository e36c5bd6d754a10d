"""`chunkmq serve` with CHUNKMQ_TIER_URL, as real processes against a real S3 server (tests/s3.py):
the start creates the bucket or refuses in one line; the running server uploads its sealed chunks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from chunkmq.storage.tier import Bucket, TierLocation
from tests.api.client import bodies, publish, queue
from tests.s3 import SeaweedS3
from tests.server import ServerProcess, free_port


def _env(s3: SeaweedS3, tier_url: str, key: str = "", secret: str = "") -> dict[str, str]:
    return {**s3.env(), "CHUNKMQ_TIER_URL": tier_url, "CHUNKMQ_AUTH": "off", "CHUNKMQ_CHUNK_SIZE": "8192",
            "CHUNKMQ_MAX_BATCH_BYTES": "8192", "AWS_ACCESS_KEY_ID": key or s3.access_key,
            "AWS_SECRET_ACCESS_KEY": secret or s3.secret_key}


def test_a_start_with_credentials_that_may_not_write_stops_with_one_line(s3: SeaweedS3, tier_url: str,
                                                                         tmp_path: Path) -> None:
    env = {**os.environ, **_env(s3, tier_url, s3.reader_key, s3.reader_secret)}
    done = subprocess.run([sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(free_port()),
                           "--data-dir", str(tmp_path / "data")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"chunkmq: {tier_url}: writing an object was refused: HTTP 403 Forbidden (AccessDenied)"]
    bad = {**env, "CHUNKMQ_TIER_URL": "https://not-s3/x"}
    done = subprocess.run([sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(free_port()),
                           "--data-dir", str(tmp_path / "data")], env=bad, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "s3://bucket/prefix" in done.stderr


def test_the_server_creates_the_bucket_and_uploads_its_sealed_chunks(s3: SeaweedS3, tier_url: str,
                                                                       tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", **_env(s3, tier_url)).start()
    bucket = Bucket(TierLocation.parse(tier_url, s3.endpoint, s3.access_key, s3.secret_key))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            for i in range(20):
                publish(api, "amq.default", *({"body": f"{i}-{j}-" + "x" * 100, "routing_key": "q"}
                                              for j in range(10)))
            sealed = [c["number"] for c in api.get("/api/v1/storage/chunks").json() if c["state"] == "sealed"]
            assert len(sealed) >= 3  # 200 messages of ~140 bytes in 8 KiB chunks
            deadline = time.monotonic() + 30
            while len(bucket.list()) < len(sealed) and time.monotonic() < deadline:
                time.sleep(0.2)
            objects = bucket.list()
            assert sorted(int(key[4:24]) for key in objects) == sealed
            assert all(key.startswith("log/") and key.endswith(".chunk") for key in objects)
            assert len(bodies(api, "q")) == 200
    finally:
        server.stop()


def test_a_consumer_reads_a_backlog_held_only_in_the_bucket(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    """With CHUNKMQ_TIER_LOCAL_BYTES of one chunk the server evicts the older chunks; pull, the
    browse and GET by id read them back from the bucket, as published."""
    env = {**_env(s3, tier_url), "CHUNKMQ_TIER_LOCAL_BYTES": str(8192 + 128)}
    server = ServerProcess(tmp_path / "data", **env).start()
    log = tmp_path / "data" / "store" / "log"
    sent = [f"{i}-" + "x" * 200 for i in range(200)]
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            ids = []
            for i in range(0, 200, 10):
                answer = publish(api, "amq.default", *({"body": b, "routing_key": "q"} for b in sent[i:i + 10]))
                ids += [r["id"] for r in answer["results"]]

            def evicted() -> bool:  # the backlog's older chunks in the bucket only; local: one uploaded, the active
                return len(list(log.glob("*.remote"))) >= 3 and len(list(log.glob("*.chunk"))) <= 2

            deadline = time.monotonic() + 30
            while not evicted() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert evicted(), sorted(p.name for p in log.iterdir())
            got = api.get(f"/api/v1/messages/{ids[0]}")
            assert got.status_code == 200 and got.json()["body"] == sent[0]
            received: list[str] = []
            while True:
                pulled = api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 50, "consumer": "c"})
                messages = pulled.json()["messages"]
                if not messages:
                    break
                received += [m["body"] for m in messages]
                api.post("/api/v1/queues/q/groups/g/ack", json={"up_to": messages[-1]["offset"] + 1})
            assert received == sent
            assert bodies(api, "q") == sent
    finally:
        server.stop()
