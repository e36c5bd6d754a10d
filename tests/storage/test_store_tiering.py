"""Tiering (app/storage/store_tiering.py): evicting sealed chunks, fetching them back, their stubs,
against a real SeaweedFS (tests/s3.py); the store's seam is its fetcher, a callable."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chunkmq.storage import StorageError, Store
from chunkmq.storage.tier import Bucket, TierLocation, chunk_object, object_key
from tests.s3 import SeaweedS3
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


@pytest.fixture
def bucket(s3: SeaweedS3, tier_url: str) -> Bucket:
    b = Bucket(TierLocation.parse(tier_url, s3.endpoint, s3.access_key, s3.secret_key, s3.region))
    b.ensure()
    return b


def _evict_sealed(store: Store, bucket: Bucket) -> list[int]:
    """Upload every sealed chunk file to `bucket` and evict it; the numbers evicted."""
    numbers = []
    for c in store.chunk_files():
        if c.sealed:
            key = object_key(c)
            data = chunk_object(c)
            bucket.put_verified(key, data)
            store.evict(c.number, key, len(data))
            numbers.append(c.number)
    return numbers


def test_evicted_chunks_are_fetched_back_by_the_reads_that_need_them(open_store: Opener, bucket: Bucket) -> None:
    s = open_store()
    s.create_queue(1)
    for i in range(40):
        s.append(msgs(1, 5, prefix=f"b{i}-" + "y" * 60))
    end = s.next_offset(1)
    before = s.read(1, 0, end)
    fetched: list[str] = []

    def fetch(key: str, size: int) -> bytes:
        fetched.append(key)
        return bucket.fetch(key, size)

    evicted = _evict_sealed(s, bucket)
    assert len(evicted) >= 2 and sorted({r.number for r in s.remote.values()}) == evicted
    assert all(n not in s.chunk_map for n in evicted)
    unfetched = s.read(1, 0, end)  # nothing fetches yet: the evicted chunks' entries read as gone
    assert len(unfetched) < len(before) and all(m in before for m in unfetched)
    s.fetcher = fetch
    assert s.warm(1, 0, 5) == 1 and fetched == [object_key(s.chunk_map[evicted[0]])]
    assert s.read(1, 0, end) == before and s.remote == {}  # the rest fetched on the read, byte for byte
    assert len(fetched) == len(evicted)
    assert s.warm(1, 0, end) == 0  # nothing evicted: nothing to do


def test_evict_refuses_the_active_chunk_and_stubs_are_dropped_once(open_store: Opener, bucket: Bucket) -> None:
    s = open_store()
    s.create_queue(1)
    for i in range(30):
        s.append(msgs(1, 5, prefix=f"c{i}-" + "z" * 60))
    active = s.active_chunk
    assert active is not None
    with pytest.raises(StorageError, match="not a sealed chunk file"):
        s.evict(active.number, "key", 1)
    evicted = _evict_sealed(s, bucket)
    r = s.remote[evicted[0]]
    assert not s.add_remote(r)  # known already
    with s.writer_lock:
        s.drop_remote([evicted[0], evicted[0]])
    assert s.take_dropped_remote() == [r] and s.take_dropped_remote() == []
    assert evicted[0] not in s.remote
    assert s.add_remote(r) and s.remote[evicted[0]] == r  # known again (a stub lost with a disk)
