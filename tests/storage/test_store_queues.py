"""The queues of a store (app/storage/store_queues.py): floors and offsets."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from chunkmq.storage import Store, UnknownQueue
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_first_offset_and_timestamps(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    stamps = []
    for i in range(20):
        stamps.append(s.append(msgs(1, 2, prefix=str(i)))[0].timestamp)
        if i % 5 == 4:
            threading.Event().wait(0.003)
    head_bytes = sum(e.length for e in s.index_entries(1, 0, 10))
    assert s.set_first_offset(1, 10) == (10, head_bytes)
    assert s.set_first_offset(1, 5) == (0, 0)  # never down
    assert s.read(1, 0, 1)[0][0] == 10
    assert s.set_first_offset(1, 10**9, durable=True)[0] == 30  # clamped to the end
    assert s.first_offset(1) == s.next_offset(1) == 40 and s.queue_bytes(1) == 0
    s.append(msgs(1, 3))
    ts = s.timestamp_of(1, 40)
    assert ts is not None and s.timestamp_of(1, 0) is None
    assert s.offset_for_timestamp(1, 0) == 40
    assert s.offset_for_timestamp(1, ts + 10**6) == 43


def test_create_is_idempotent_and_a_deleted_queue_comes_back_empty(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    with pytest.raises(ValueError, match="u32"):
        s.create_queue(1 << 32)
    s.create_queue(7)
    s.append(msgs(7, 4))
    s.create_queue(7)  # idempotent: the queue keeps what it holds
    assert s.next_offset(7) == 4 and s.queue_ids() == [7] and s.index_files(7)
    s.delete_queue(7)
    s.delete_queue(7)
    assert s.queue_ids() == [] and not (tmp_path / "store" / "queues" / "7").exists()
    with pytest.raises(UnknownQueue):
        s.next_offset(7)
    s.create_queue(7)
    s.close()
    again = open_store()
    assert again.first_offset(7) == again.next_offset(7) == 0 and again.queue_bytes(7) == 0
