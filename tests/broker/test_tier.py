"""Uploads of sealed chunks to a real S3 server (app/broker/tier.py, tests/s3.py): verified objects,
the manifest, rewrites, retention and a bucket that fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.tier import Tier
from chunkmq.config import Settings
from chunkmq.meta.tier import EVICTED, UPLOADED, UPLOADING
from chunkmq.storage.chunk import Chunk
from chunkmq.storage.tier import Bucket, TierError, TierLocation, chunk_object, object_key
from tests.broker.conftest import with_broker
from tests.s3 import SeaweedS3

CHUNK = 4096


def tier_settings(s3: SeaweedS3, tier_url: str, **more: Any) -> dict[str, Any]:
    """Settings of a broker tiering to `tier_url` on the test server, with 4 KiB chunks."""
    return {"tier_url": tier_url, "tier_endpoint": s3.endpoint, "tier_access_key_id": s3.access_key,
            "tier_secret_access_key": s3.secret_key, "chunk_size": CHUNK, "max_batch_bytes": CHUNK,
            "gc_threshold": 0, **more}


async def _fill(broker: Broker, queue: str, n: int, size: int = 300) -> None:
    for i in range(n):
        await broker.publish("", [{"body": f"{i:05d}-" + "x" * size, "routing_key": queue}], queue_name=queue)


def _sealed(broker: Broker) -> list[Chunk]:
    store = broker.store
    return [c for c in store.chunk_files() if c.sealed and c is not store.active_chunk]


def _check_bucket_matches(tier: Tier, broker: Broker) -> None:
    """Every sealed chunk is an uploaded row whose object holds the chunk's bytes, and nothing else is there."""
    rows = tier.manifest.rows()
    sealed = _sealed(broker)
    assert sorted(rows) == [c.number for c in sealed]
    objects = tier.bucket.list()
    assert sorted(objects) == sorted(object_key(c) for c in sealed)
    for c in sealed:
        row = rows[c.number]
        assert (row.state, row.object_key, row.last) == (UPLOADED, object_key(c), c.last)
        assert tier.bucket.get(row.object_key) == chunk_object(c)  # byte for byte
        assert objects[row.object_key] == row.size


def test_sealed_chunks_are_uploaded_verified_and_recorded(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 60)
        sealed = _sealed(broker)
        assert len(sealed) >= 3
        tier.measure()
        assert tier.lag_bytes == sum(c.file_bytes for c in sealed) and tier.bucket_bytes == 0
        sent = tier.upload_round()
        assert sent == sum(c.file_bytes for c in sealed)
        _check_bucket_matches(tier, broker)
        assert (tier.lag_bytes, tier.bucket_bytes, tier.uploaded_total) == (0, sent, sent)
        assert tier.upload_round() == 0  # nothing new: nothing sent again
        await _fill(broker, "q", 30)
        assert tier.upload_round() > 0
        _check_bucket_matches(tier, broker)

    with_broker(tmp_path, work, **tier_settings(s3, tier_url))


def test_an_upload_cut_short_is_done_again(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    """A row left in `uploading` (a crash during the PUT) and a half-written object: the next round
    uploads the chunk again and verifies it."""
    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 30)
        first = _sealed(broker)[0]
        key = object_key(first)
        tier.manifest.put(first.number, first.last, key, first.file_bytes, "", UPLOADING)
        tier.bucket.put_verified(key, bytes(chunk_object(first))[:100])
        tier.measure()
        assert tier.lag_bytes == sum(c.file_bytes for c in _sealed(broker))
        tier.upload_round()
        _check_bucket_matches(tier, broker)

    with_broker(tmp_path, work, **tier_settings(s3, tier_url))


def test_retention_and_the_collector_reach_the_bucket(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    """A chunk retention deletes leaves the bucket and the manifest; a chunk the collector rewrites
    (merging its neighbours) gets a new object, and the objects it replaced go."""
    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("big", {})
        await broker.declare_queue("few", {})
        for i in range(8):
            await _fill(broker, "big", 6)
            await broker.publish("", [{"body": f"few-{i}", "routing_key": "few"}], queue_name="few")
        tier.upload_round()
        _check_bucket_matches(tier, broker)
        before = set(tier.bucket.list())
        broker.purge("big")
        await broker.run_retention()
        report = broker.store.collect(0.5)
        assert report.rewrites >= 1
        tier.upload_round()
        _check_bucket_matches(tier, broker)
        assert set(tier.bucket.list()) - before  # the rewritten files' new objects
        few = broker.store.read(broker.queue("few").id, 0, 100)
        assert len(few) == 8  # (the rewrite kept them)
        broker.purge("few")
        await broker.run_retention()
        tier.upload_round()
        _check_bucket_matches(tier, broker)

    with_broker(tmp_path, work, **tier_settings(s3, tier_url))


def test_a_failing_bucket_is_retried_with_backoff(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        good = tier.bucket
        loc = good.loc
        tier.bucket = Bucket(TierLocation(loc.url, loc.bucket, loc.prefix, loc.endpoint, loc.access_key_id,
                                          "not-the-secret", loc.region))
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 30)
        assert tier.upload_round() == 0
        assert tier.failures == 1 and "SignatureDoesNotMatch" in tier.last_error
        assert tier.lag_bytes == sum(c.file_bytes for c in _sealed(broker)) > 0
        tier.bucket = good
        assert tier.upload_round() == 0  # within the retry delay: nothing tried
        assert tier.upload_round(force=True) > 0
        assert (tier.failures, tier.last_error, tier.lag_bytes) == (0, "", 0)
        _check_bucket_matches(tier, broker)

    with_broker(tmp_path, work, **tier_settings(s3, tier_url))


def test_open_without_a_url_is_none_and_refused_credentials_raise(s3: SeaweedS3, tier_url: str,
                                                                  tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        assert Tier.open(broker.settings, broker.store, broker.meta) is None
        refused = Settings(data_dir=broker.settings.data_dir, **tier_settings(
            s3, tier_url, tier_access_key_id=s3.reader_key, tier_secret_access_key=s3.reader_secret))
        with pytest.raises(TierError, match=f"^{tier_url}: writing an object was refused"):
            Tier.open(refused, broker.store, broker.meta)

    with_broker(tmp_path, work)


def _local_chunk_files(broker: Broker) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.settings.data_dir / "store" / "log").glob("*.chunk"))


async def _pull_all(broker: Broker, queue: str, group: str) -> list[str]:
    got: list[str] = []
    while True:
        page = orjson.loads(await broker.pull(queue, group, 50, 0, "c"))["messages"]
        if not page:
            return got
        got += [m["body"] for m in page]
        broker.ack(queue, group, {"up_to": page[-1]["offset"] + 1})


def test_past_the_local_bytes_the_oldest_chunks_leave_and_read_back(s3: SeaweedS3, tier_url: str,
                                                                    tmp_path: Path) -> None:
    """CHUNKMQ_TIER_LOCAL_BYTES of two chunks: every older uploaded chunk is evicted (the manifest
    first), a consumer reads the whole backlog from the bucket, byte for byte as published, and the
    chunks it fetched back leave again at the next round."""
    local = 2 * (CHUNK + 128)
    sent = [f"{i:05d}-" + "x" * 300 for i in range(80)]

    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None and tier.local_bytes == local
        await broker.declare_queue("q", {})
        for body in sent:
            await broker.publish("", [{"body": body, "routing_key": "q"}], queue_name="q")
        browsed = orjson.loads(broker.browse("q", 0, None, 1000))["messages"]
        sealed = [c.number for c in _sealed(broker)]
        tier.upload_round()
        rows = tier.manifest.rows()
        evicted = [n for n, r in rows.items() if r.state == EVICTED]
        assert evicted == sealed[:-2] and len(evicted) >= 3  # the oldest; two stay
        assert [n for n, r in rows.items() if r.state == UPLOADED] == sealed[-2:]
        assert _local_chunk_files(broker) == [*sealed[-2:], broker.store.active_chunk.number]  # type: ignore[union-attr]
        assert tier.lag_bytes == 0 and tier.bucket_bytes == sum(r.size for r in rows.values())
        assert await _pull_all(broker, "q", "g") == sent  # through the bucket
        assert tier.fetched == len(evicted)
        await broker.warm(broker.queue("q"), 0, 1000)  # what the API does before a browse
        assert orjson.loads(broker.browse("q", 0, None, 1000))["messages"] == browsed
        # The fetched chunks are uploaded ones again. Those never fetched leave first, then the
        # fetched ones by when they were fetched: the two read last stay.
        tier.upload_round()
        rows = tier.manifest.rows()
        assert [n for n, r in rows.items() if r.state != EVICTED] == evicted[-2:]
        assert _local_chunk_files(broker) == [*evicted[-2:], broker.store.active_chunk.number]  # type: ignore[union-attr]
        first = browsed[0]
        await broker.warm_message(first["id"])
        assert orjson.loads(broker.get_message(first["id"])[1])["body"] == sent[0]

    with_broker(tmp_path, work, **tier_settings(s3, tier_url, tier_local_bytes=local))


def test_a_restart_reads_evicted_chunks_and_the_manifest_brings_back_lost_stubs(s3: SeaweedS3, tier_url: str,
                                                                                tmp_path: Path) -> None:
    local = CHUNK + 128
    sent = [f"{i:05d}-" + "x" * 300 for i in range(60)]
    settings = tier_settings(s3, tier_url, tier_local_bytes=local)

    async def fill(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        for body in sent:
            await broker.publish("", [{"body": body, "routing_key": "q"}], queue_name="q")
        tier.upload_round()
        assert broker.store.remote

    with_broker(tmp_path, fill, **settings)
    for stub in (tmp_path / "data" / "store" / "log").glob("*.remote"):
        stub.unlink()  # as if they were lost: the manifest still has them

    async def read(broker: Broker) -> None:
        assert not broker.store.remote
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None and broker.store.remote
        assert await _pull_all(broker, "q", "g") == sent

    with_broker(tmp_path, read, **settings)


def test_retention_deletes_evicted_chunks_from_the_bucket(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 60)
        tier.upload_round()
        assert len(broker.store.remote) >= 3
        broker.purge("q")
        await broker.run_retention()
        assert broker.store.remote == {}
        tier.upload_round()
        _check_bucket_matches(tier, broker)

    with_broker(tmp_path, work, **tier_settings(s3, tier_url, tier_local_bytes=CHUNK + 128))


def test_the_views_and_metrics_show_the_tier(s3: SeaweedS3, tier_url: str, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from chunkmq.api.operations import BrokerCollector
    from chunkmq.broker import views

    def scrape(broker: Broker) -> dict[str, float]:
        registry = CollectorRegistry()
        registry.register(BrokerCollector(broker))
        lines = generate_latest(registry).decode().splitlines()
        return {line.split()[0]: float(line.split()[1]) for line in lines if line.startswith("chunkmq_tier_")}

    async def work(broker: Broker) -> None:
        assert views.tier(broker) is None and scrape(broker) == {}  # no tier: nothing new
        broker.tier = Tier.open(Settings(data_dir=broker.settings.data_dir, **tier_settings(
            s3, tier_url, tier_local_bytes=CHUNK + 128)), broker.store, broker.meta)
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 40)
        broker.tier.measure()  # type: ignore[union-attr]
        lag = sum(c.file_bytes for c in _sealed(broker))
        assert scrape(broker)["chunkmq_tier_lag_bytes"] == lag > 0
        broker.tier.upload_round()  # type: ignore[union-attr]
        view = views.tier(broker)
        assert view is not None and (view.lag_bytes, view.failures, view.uploaded_bytes) == (0, 0, lag)
        got = scrape(broker)
        assert got["chunkmq_tier_uploaded_bytes_total"] == got["chunkmq_tier_bucket_bytes"] == lag
        assert got["chunkmq_tier_evictions_total"] == view.evictions > 0
        await _pull_all(broker, "q", "g")
        assert scrape(broker)["chunkmq_tier_fetches_total"] == view.evictions

    with_broker(tmp_path, work, chunk_size=CHUNK, max_batch_bytes=CHUNK, gc_threshold=0)


def test_tier_verify_reports_missing_and_extra_objects_and_sweeps_orphans(s3: SeaweedS3, tier_url: str,
                                                                         tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from chunkmq.broker.tier import verify

    keys: list[str] = []

    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 30)
        tier.upload_round()
        clean = verify(tier.manifest, tier.bucket)
        assert (clean.missing, clean.extra, clean.rows) == ([], [], clean.objects) and clean.rows >= 2
        keys.extend(sorted(tier.bucket.list()))
        tier.bucket.delete(keys[0])  # lost
        tier.bucket.put_verified("log/00000000000000000099-00000000000000000099-1.chunk", b"half an upload")
        report = verify(tier.manifest, tier.bucket)
        assert report.missing == [keys[0]]
        assert report.extra == ["log/00000000000000000099-00000000000000000099-1.chunk"] and report.swept == []

    with_broker(tmp_path, work, **tier_settings(s3, tier_url))
    env = {**os.environ, **s3.env(), "CHUNKMQ_TIER_URL": tier_url}

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "chunkmq.cli", "tier", "verify", "--data-dir",
                               str(tmp_path / "data"), *more], env=env, capture_output=True, text=True, timeout=60)

    done = run()
    orphan = "log/00000000000000000099-00000000000000000099-1.chunk"
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"missing: {keys[0]}", f"extra: {orphan}",
        f"{tier_url}: {len(keys)} chunks in the manifest, {len(keys)} objects; 1 missing, 1 extra"]
    swept = run("--sweep")
    assert swept.returncode == 1 and f"swept: {orphan}" in swept.stdout and "1 swept" in swept.stdout
    assert f"extra: {orphan}" not in run().stdout
    none = subprocess.run([sys.executable, "-m", "chunkmq.cli", "tier", "verify", "--data-dir", str(tmp_path / "data")],
                          env={k: v for k, v in env.items() if k != "CHUNKMQ_TIER_URL"}, capture_output=True,
                          text=True, timeout=60)
    assert none.returncode == 2 and "CHUNKMQ_TIER_URL is not set" in none.stderr


def test_a_broker_on_an_empty_data_directory_serves_what_the_bucket_holds(s3: SeaweedS3, tier_url: str,
                                                                          tmp_path: Path) -> None:
    """Same metadata database, same bucket, the data directory lost: every message of an uploaded
    chunk is served again at its offset and id; a group goes on from its ack floor."""
    import shutil

    settings = tier_settings(s3, tier_url, database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                             tier_local_bytes=2 * (CHUNK + 128))
    kept: dict[str, list[dict[str, Any]]] = {}

    async def fill(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        for q in ("a", "b"):
            await broker.declare_queue(q, {})
        for i in range(60):
            await broker.publish("", [{"body": f"a{i}-" + "x" * 200, "routing_key": "a"},
                                      {"body": f"b{i}", "routing_key": "b"}], queue_name="a")
            await broker.publish("", [{"body": f"b{i}-" + "y" * 100, "routing_key": "b"}], queue_name="b")
        page = orjson.loads(await broker.pull("a", "g", 10, 0, "c"))["messages"]
        broker.ack("a", "g", {"up_to": page[-1]["offset"] + 1})
        await broker.committer.round()
        tier.upload_round()
        assert broker.store.remote  # some in the bucket only, too
        uploaded_end = max(c.end for c in _sealed(broker))
        for q in ("a", "b"):
            kept[q] = [m for m in orjson.loads(broker.browse(q, 0, None, 1000))["messages"]
                       if int(m["id"], 16) < uploaded_end]

    with_broker(tmp_path, fill, **settings)
    shutil.rmtree(tmp_path / "data")

    async def read(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        for q in ("a", "b"):
            await broker.warm(broker.queue(q), 0, 1000)
            got = orjson.loads(broker.browse(q, 0, None, 1000))["messages"]
            assert got == kept[q] and len(got) > 20
        page = orjson.loads(await broker.pull("a", "g", 5, 0, "c"))["messages"]
        assert page[0]["offset"] == 10 and page[0]["body"] == kept["a"][10]["body"]
        tier.upload_round()  # nothing to upload again
        assert tier.uploaded_total == 0 and tier.lag_bytes == 0

    with_broker(tmp_path, read, **settings)


def test_the_bucket_stopped_during_publishing_and_started_again(tmp_path: Path) -> None:
    """Publishing goes on while the bucket is down; the rounds fail and back off, the lag grows;
    once the bucket is back every chunk is uploaded and verified."""
    server = SeaweedS3().start()
    url = f"s3://{server.bucket_name()}/p"

    async def work(broker: Broker) -> None:
        tier = Tier.open(broker.settings, broker.store, broker.meta)
        assert tier is not None
        await broker.declare_queue("q", {})
        await _fill(broker, "q", 20)
        tier.upload_round()
        server.stop()
        await _fill(broker, "q", 30)  # publishes are not held up
        tier.upload_round()
        assert tier.failures == 1 and tier.lag_bytes > 0 and tier.last_error.startswith(url)
        tier.upload_round(force=True)
        assert tier.failures == 2
        server.start()
        tier.upload_round(force=True)
        assert (tier.failures, tier.lag_bytes) == (0, 0)
        _check_bucket_matches(tier, broker)
        assert len(await _pull_all(broker, "q", "g")) == 50

    try:
        with_broker(tmp_path, work, **tier_settings(server, url))
    finally:
        server.remove()
