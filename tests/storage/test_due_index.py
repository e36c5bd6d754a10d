"""The due index format: write, read back in due order, recover after a crash, cut a damaged tail."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chunkmq.storage import due_index
from chunkmq.storage.due_index import ENTRY, HEADER, DueIndex


def _drain(index: DueIndex, now: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    while batch := index.take_due(now):
        out += batch
    return out


def test_entries_come_back_in_due_order_and_only_when_due(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    rng = random.Random(1)
    oracle = [(rng.randrange(1_000, 100_000), p * 10) for p in range(5_000)]
    for due, position in oracle:
        index.add(due, position)
    assert index.pending == 5_000 and index.next_due() == min(d for d, _ in oracle)
    assert index.pinned_position() == 0
    got = _drain(index, 50_000)
    assert got == sorted(e for e in oracle if e[0] <= 50_000)
    assert index.watermark == 50_000 and index.pending == len(oracle) - len(got)
    assert _drain(index, 200_000) == sorted(e for e in oracle if e[0] > 50_000)
    assert index.pending == 0 and index.next_due() is None and index.pinned_position() is None


def test_a_window_bounds_memory_and_refills_from_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(due_index, "WINDOW", 100)
    index = DueIndex.create(tmp_path / "q", 0)
    oracle = [(10_000 - p, p) for p in range(1_000)]  # due order is the reverse of log order
    for due, position in oracle:
        index.add(due, position)
        assert len(index._heap) <= 200
    assert _drain(index, 20_000) == sorted(oracle)


def test_a_reopened_index_keeps_what_was_flushed_and_the_watermark(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    for p in range(100):
        index.add(1_000 + p, p)
    assert len(_drain(index, 1_049)) == 50
    index.flush(100)
    again = DueIndex.open(tmp_path / "q", log_end=100)
    assert again.scan_from == 100 and again.pending == 50 and again.watermark == 1_049
    assert _drain(again, 10_000) == [(1_000 + p, p) for p in range(50, 100)]


def test_entries_past_the_checkpoint_or_the_log_end_are_cut_for_the_replay(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    for p in range(10):
        index.add(5_000, p)
    index.flush(5)  # only positions below 5 are known to be indexed
    again = DueIndex.open(tmp_path / "q", log_end=100)
    assert again.scan_from == 5 and again.pending == 5  # the caller replays the log from 5
    again.add(5_000, 5)
    again.flush(3)
    assert DueIndex.open(tmp_path / "q", log_end=3).pending == 3  # the log lost its tail


@pytest.mark.parametrize("damage", ["torn", "zeros", "garbage", "disorder"])
def test_a_damaged_tail_is_cut_at_the_first_bad_entry(tmp_path: Path, damage: str) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    for p in range(20):
        index.add(9_000, p)
    index.flush(1_000)
    segment = next((tmp_path / "q").glob("*.due"))
    raw = bytearray(segment.read_bytes())
    at = HEADER + 12 * ENTRY.size
    if damage == "torn":
        raw = raw[: at + 7]
    elif damage == "zeros":
        raw[at:] = bytes(len(raw) - at)
    elif damage == "garbage":
        raw[at: at + ENTRY.size] = ENTRY.pack(9_000, 0)
    else:
        raw[at: at + ENTRY.size] = ENTRY.pack(9_000, 3)  # position 2: not after position 11
    segment.write_bytes(bytes(raw))
    again = DueIndex.open(tmp_path / "q", log_end=1_000)
    assert again.pending == 12
    assert segment.stat().st_size == HEADER + 12 * ENTRY.size
    assert [p for _, p in _drain(again, 10_000)] == list(range(12))


def test_a_lost_or_damaged_state_replays_from_the_start(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    index.add(7, 1)
    index.flush(2)
    (tmp_path / "q" / "state").write_bytes(b"junk")
    again = DueIndex.open(tmp_path / "q", log_end=2)
    assert again.scan_from == 0 and again.pending == 0


def test_positions_must_increase(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    index.add(5, 10)
    with pytest.raises(ValueError):
        index.add(5, 10)


def test_delivered_segments_are_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(due_index, "SEGMENT_ENTRIES", 10)
    index = DueIndex.create(tmp_path / "q", 0)
    for p in range(35):
        index.add(100 + p, p)
    assert len(list((tmp_path / "q").glob("*.due"))) == 4
    _drain(index, 125)
    index.flush(35)
    assert len(list((tmp_path / "q").glob("*.due"))) == 2
    assert [p for _, p in _drain(DueIndex.open(tmp_path / "q", 35), 1_000)] == list(range(26, 35))


def test_entries_put_back_are_due_again_and_not_counted_delivered(tmp_path: Path) -> None:
    index = DueIndex.create(tmp_path / "q", 0)
    for p in range(5):
        index.add(100 + p, p)
    taken = index.take_due(1_000)
    assert len(taken) == 5 and index.pending == 0 and index.pinned_position() is None
    index.put_back(taken[2:])
    assert index.pending == 3 and index.watermark == 101 and index.pinned_position() == 2
    index.flush(5)
    again = DueIndex.open(tmp_path / "q", 5)
    assert [p for _, p in _drain(again, 1_000)] == [2, 3, 4]
