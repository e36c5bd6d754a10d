"""app/storage/queue_index.py: clearing the entries a torn write left past a queue's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkmq.storage.queue_index import QueueIndex


def entries(count: int) -> list[int]:
    """`count` set entries, flat as QueueIndex.write takes them (position + 1, length | tag hash << 32)."""
    return [v for i in range(count) for v in (i * 100 + 1, 100)]


@pytest.mark.parametrize("stale", [0, 1, 255, 256, 257, 3000])
def test_zero_from_clears_every_stale_entry_across_files(tmp_path: Path, stale: int) -> None:
    index = QueueIndex(tmp_path, queue_id=1, capacity=1024)
    index.write(0, entries(10 + stale))  # 10 live entries, then `stale` ones past next (up to 3 files)
    try:
        assert index.zero_from(10) == stale
        assert [index.entry(o)[0] for o in range(10)] == [o * 100 + 1 for o in range(10)]
        assert all(index.entry(o)[0] == 0 for o in range(10, 10 + stale + 1))
        assert index.zero_from(10) == 0
    finally:
        index.close()
