"""The statistics of a store (app/storage/store_statistics.py)."""

from __future__ import annotations

from collections.abc import Callable

from chunkmq.storage import (
    Store,
)
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_statistics(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for _ in range(40):
        s.append(msgs(1, 5, prefix="x" * 58))  # records of about 77 bytes
    s.read(1, 0, 1000)  # from the chunk files
    s.read(1, 195, 5)  # a tail reader: from the cache of recent batches
    info = s.chunks()
    assert sum(c.records for c in info) == 200
    assert sum(c.writes for c in info) == 40
    assert sum(c.reads_cache for c in info) == 5 and sum(c.reads_disk for c in info) == 200
    assert all(c.created_ms > 0 and c.first_timestamp > 0 for c in info)
    assert s.disk_bytes() >= sum(c.data_bytes for c in info)


def test_held_sums_every_queue_and_counts_again_only_those_that_changed(open_store: Opener) -> None:
    s = open_store()
    for q in (1, 2, 3):
        s.create_queue(q)
        s.append(msgs(q, q))

    def every() -> tuple[int, int]:
        return (sum(s.next_offset(q) - s.first_offset(q) for q in s.queue_ids()),
                sum(s.queue_bytes(q) for q in s.queue_ids()))

    assert s.held() == every() and s.held()[0] == 6
    s.append(msgs(2, 4))
    s.set_first_offset(3, 2)
    s.delete_queue(1)
    assert s.held() == every() and s.held()[0] == 2 + 4 + 1
