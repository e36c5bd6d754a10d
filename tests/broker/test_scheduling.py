"""The schedule's record prefix, its delay fields, and its replay of the log after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.scheduling import (
    FLAG_DELAYED,
    MAX_DELAY_MS,
    Schedule,
    decode_delayed,
    encode_delayed,
    has_delay,
    parse_delay,
)
from chunkmq.storage import MessageColumns, Store, StoreOptions


def test_the_prefix_round_trips() -> None:
    assert decode_delayed(encode_delayed(123, (1, 70_000), b"blob")) == (123, (1, 70_000), b"blob")


def test_delay_fields() -> None:
    assert has_delay([{"body": "a"}, {"delay_ms": 1}]) and not has_delay([{"body": "a"}, "x"])
    assert parse_delay({"delay_ms": 5}, 0, 1_000) == 1_005
    assert parse_delay({"deliver_at_ms": 7}, 0, 1_000) == 7
    assert parse_delay({}, 0, 1_000) is None
    for bad in ({"delay_ms": MAX_DELAY_MS + 1}, {"delay_ms": False}, {"deliver_at_ms": 1_000 + MAX_DELAY_MS + 1}):
        with pytest.raises(InvalidInput):
            parse_delay(bad, 3, 1_000)


def _append_delayed(store: Store, due: int, queues: tuple[int, ...]) -> int:
    data = encode_delayed(due, queues, b"x")
    return store.append(MessageColumns([data], [()], flags=[FLAG_DELAYED])).positions[0]


def test_an_unflushed_schedule_is_rebuilt_from_the_log_and_pins_it(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=1 << 16))
    store.create_queue(1)
    store.create_queue(2)
    schedule = Schedule.open(tmp_path / "due", store)
    first = _append_delayed(store, 5_000, (1, 2))
    schedule.add(1, 5_000, first)
    schedule.add(2, 5_000, first)
    schedule.flush(store.end_position, schedule.watermarks())
    assert store.pinned_from == first
    later = _append_delayed(store, 6_000, (1,))
    schedule.add(1, 6_000, later)  # never flushed: the crash loses the entry, not the record
    store.close()
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=1 << 16))
    again = Schedule.open(tmp_path / "due", store)
    assert again.scheduled(1) == (2, 5_000) and again.scheduled(2) == (1, 5_000)
    assert again.take_due(10_000) == {1: [(5_000, first), (6_000, later)], 2: [(5_000, first)]}
    again.flush(store.end_position, again.watermarks())
    assert store.pinned_from is None
    again.forget(1)
    assert not (tmp_path / "due" / f"{1:010d}").exists()
    store.close()
