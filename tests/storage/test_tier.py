"""The bucket side of tiered storage (app/storage/tier.py) against a real SeaweedFS (tests/s3.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from chunkmq.storage import NewMessage, Store
from chunkmq.storage.chunk import Chunk
from chunkmq.storage.tier import Bucket, TierError, TierLocation, chunk_object, object_key, restore_file
from tests.s3 import SeaweedS3
from tests.storage.conftest import SMALL, msgs


def _bucket(s3: SeaweedS3, url: str, key: str = "", secret: str = "") -> Bucket:
    return Bucket(TierLocation.parse(url, s3.endpoint, key or s3.access_key, secret or s3.secret_key, s3.region))


def test_parse_takes_bucket_and_prefix() -> None:
    loc = TierLocation.parse("s3://b/some/prefix/", "http://127.0.0.1:9/")
    assert (loc.bucket, loc.prefix, loc.endpoint) == ("b", "some/prefix", "http://127.0.0.1:9")
    assert TierLocation.parse("s3://b").prefix == ""
    assert TierLocation.parse("s3://b").http_endpoint == "https://s3.us-east-1.amazonaws.com"
    for bad in ("b/prefix", "http://b/p", "s3:///p", "s3://b/p?x=1"):
        with pytest.raises(ValueError, match="s3://bucket/prefix"):
            TierLocation.parse(bad)


def test_ensure_creates_a_missing_bucket(s3: SeaweedS3, tier_url: str) -> None:
    bucket = _bucket(s3, tier_url)
    bucket.ensure()
    bucket.ensure()  # and an existing one is fine
    assert bucket.list() == {}
    assert bucket.list("") == {}  # the probe object was deleted


def test_ensure_names_the_url_and_what_was_refused(s3: SeaweedS3, tier_url: str) -> None:
    _bucket(s3, tier_url).ensure()
    with pytest.raises(TierError) as reader:
        _bucket(s3, tier_url, s3.reader_key, s3.reader_secret).ensure()
    assert str(reader.value) == f"{tier_url}: writing an object was refused: HTTP 403 Forbidden (AccessDenied)"
    with pytest.raises(TierError) as wrong:
        _bucket(s3, tier_url, s3.access_key, "not-the-secret").ensure()
    assert "SignatureDoesNotMatch" in str(wrong.value) and "\n" not in str(wrong.value)
    missing = f"s3://{s3.bucket_name()}/p"
    with pytest.raises(TierError, match=f"^{missing}: .*refused: HTTP 403"):
        _bucket(s3, missing, s3.reader_key, s3.reader_secret).ensure()


def test_unreachable_endpoint_is_one_line(tier_url: str) -> None:
    from tests.server import free_port

    bucket = Bucket(TierLocation.parse(tier_url, f"http://127.0.0.1:{free_port()}", "k", "s"))
    with pytest.raises(TierError) as info:
        bucket.ensure()
    assert str(info.value).startswith(f"{tier_url}: ") and "\n" not in str(info.value)


def test_put_verified_get_range_list_delete(s3: SeaweedS3, tier_url: str) -> None:
    bucket = _bucket(s3, tier_url)
    bucket.ensure()
    data = bytes(range(256)) * 4096  # 1 MiB
    up = bucket.put_verified("log/a.chunk", data)
    assert (up.key, up.size) == ("log/a.chunk", len(data))
    assert bucket.get("log/a.chunk") == data
    assert bucket.get_range("log/a.chunk", 1000, 70_000) == data[1000:70_000]
    assert bucket.list() == {"log/a.chunk": len(data)}
    bucket.delete("log/a.chunk")
    bucket.delete("log/a.chunk")  # gone already: no error
    assert bucket.list() == {}
    with pytest.raises(TierError, match=r"reading log/a\.chunk"):
        bucket.get_range("log/a.chunk", 0, 10)


def _sealed(store: Store) -> list[Chunk]:
    return [c for c in store.chunk_files() if c.sealed and c is not store.active_chunk]


def test_chunk_object_round_trip_through_the_bucket(s3: SeaweedS3, tier_url: str, tmp_path: Path,
                                                    open_store: Callable[..., Store]) -> None:
    """Upload sealed chunks (one rewritten by the collector too), fetch them back as files: the
    files read as the same chunk, byte for byte where the chunk holds anything."""
    store = open_store()
    store.create_queue(1)
    store.create_queue(2)
    for i in range(12):
        store.append([NewMessage(b"e" * 200, [1]) for _ in range(10)] + msgs(2, 1, prefix=f"x{i}"))
    store.retain({1: store.next_offset(1)})  # queue 1 done: its chunks' live share is queue 2's
    store.collect(0.5)
    for _ in range(12):  # and plain sealed chunks after the rewritten ones
        store.append([NewMessage(b"f" * 200, [1]) for _ in range(10)])
    chunks = _sealed(store)
    assert len(chunks) >= 2 and any(c.rewritten for c in chunks)
    bucket = _bucket(s3, tier_url)
    bucket.ensure()
    for c in chunks:
        key = object_key(c)
        assert key.startswith(f"log/{c.number:020d}-{c.last:020d}-")
        body = chunk_object(c)
        assert len(body) == c.file_bytes  # the compact object: no unused data region
        bucket.put_verified(key, body)
        path = tmp_path / f"back-{c.number}"
        restore_file(bucket.get(key), path, c.data_size)
        back = Chunk.open(path, c.number, c.data_size)
        try:
            assert back.read_footer()
            assert (back.data_bytes, back.records, back.last, back.rewritten) == (c.data_bytes, c.records, c.last,
                                                                                 c.rewritten)
            end = 64 + c.file_bytes - 128
            assert back.mm[:end] == c.mm[:end]
            assert back.mm[64 + c.data_size:] == c.mm[64 + c.data_size:]
            assert object_key(back) == key
        finally:
            back.close()
        assert bucket.get_range(key, 64, 64 + 100) == c.mm[64:164]  # data offsets are the file's


def test_chunk_object_refuses_the_active_chunk(open_store: Callable[..., Store]) -> None:
    store = open_store(options=SMALL)
    store.create_queue(1)
    store.append(msgs(1, 3))
    active = store.active_chunk
    assert active is not None and not active.sealed
    with pytest.raises(Exception, match="not sealed"):
        chunk_object(active)


def _tiered(store: Store, bucket: Bucket) -> dict[int, str]:
    """Upload every sealed chunk file of `store` and let it fetch from `bucket`: number -> key."""
    store.fetcher = bucket.fetch
    keys = {}
    for c in _sealed(store):
        keys[c.number] = object_key(c)
        bucket.put_verified(keys[c.number], chunk_object(c))
    return keys


def _evict_all(store: Store, keys: dict[int, str], bucket: Bucket) -> int:
    """Evict every chunk of `keys` that is on local disk now."""
    sizes = bucket.list()
    return sum(store.evict(n, key, sizes[key]) for n, key in keys.items() if n in store.chunk_map)


def test_evicted_chunks_read_back_the_same_through_every_read(s3: SeaweedS3, tier_url: str, tmp_path: Path,
                                                             open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(1)
    for i in range(80):
        store.append(msgs(1, 5, prefix=f"b{i}-" + "y" * 80))
    end = store.next_offset(1)
    before = store.read(1, 0, end)
    columns = store.read_columns(1, 0, end)
    ts = [store.timestamp_of(1, o) for o in range(end)]
    bucket = _bucket(s3, tier_url)
    bucket.ensure()
    keys = _tiered(store, bucket)
    assert len(keys) >= 3
    on_disk = {p.name for p in (tmp_path / "store" / "log").iterdir()}
    freed = _evict_all(store, keys, bucket)
    assert freed == sum(8192 + 128 for _ in keys)
    assert sorted({r.number for r in store.remote.values()}) == sorted(keys)
    left = {p.name for p in (tmp_path / "store" / "log").iterdir()}
    assert len(left - on_disk) == len(keys) and all(n.endswith(".remote") for n in left - on_disk)
    assert store.read(1, 0, end) == before  # fetched back, byte for byte
    assert store.remote == {}
    for n in keys:  # and they are local chunk files again
        assert store.chunk_map[n].sealed
    _evict_all(store, keys, bucket)
    assert [store.timestamp_of(1, o) for o in range(end)] == ts
    _evict_all(store, keys, bucket)
    page = store.read_columns(1, 0, end)
    assert bytes(page.buf) == bytes(columns.buf) and page.next_offset == columns.next_offset
    for name in ("offsets", "positions", "timestamps", "data_start", "data_len"):
        assert list(getattr(page, name)) == list(getattr(columns, name))
    _evict_all(store, keys, bucket)
    first = before[0]
    assert store.read_at(first[1]).data == first[5]
    _evict_all(store, keys, bucket)
    assert store.offset_for_timestamp(1, ts[end // 2]) == ts.index(ts[end // 2])


def test_evicted_chunks_survive_a_restart_and_retention(s3: SeaweedS3, tier_url: str, tmp_path: Path,
                                                       open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(1)
    store.create_queue(2)
    for i in range(60):
        store.append(msgs(1, 5, prefix=f"a{i}-" + "y" * 80) + msgs(2, 1, prefix=f"z{i}"))
    before1, before2 = store.read(1, 0, 1000), store.read(2, 0, 1000)
    bucket = _bucket(s3, tier_url)
    bucket.ensure()
    keys = _tiered(store, bucket)
    _evict_all(store, keys, bucket)
    store.retain({1: 0, 2: 0})
    store.collect(0.5)  # nothing merges across evicted chunks
    store.close()
    again = open_store()
    assert sorted({r.number for r in again.remote.values()}) == sorted(keys)
    # nothing fetches yet: the evicted chunks' entries read as gone, and stay
    assert again.read(1, 0, 1000) == [m for m in before1 if m[1] // 8192 not in keys]
    assert again.first_offset(1) == 0
    again.fetcher = bucket.fetch
    assert again.read(1, 0, 1000) == before1 and again.read(2, 0, 1000) == before2
    for n, key in keys.items():
        if n in again.chunk_map:
            again.evict(n, key, bucket.list()[key])
    assert again.take_dropped_remote() == []
    again.retain({1: again.next_offset(1), 2: again.next_offset(2)})  # both done: every chunk unneeded
    dropped = again.take_dropped_remote()
    assert sorted(r.number for r in dropped) == sorted(keys) and again.remote == {}
    assert not list((tmp_path / "store" / "log").glob("*.remote"))
