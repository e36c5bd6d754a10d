"""The idempotency window and its snapshot segments on disk (app/broker/dedup.py), on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson

from chunkmq.broker.dedup import IdempotencyWindow, WindowSnapshots


def result(n: int) -> bytes:
    return b'{"id":"%016x","routed":[],"duplicate":false}' % n


def entries(keys: list[str], timestamps: list[int], results: list[bytes]) -> list[tuple[str, int, bytes]]:
    return list(zip(keys, timestamps, results, strict=True))


def test_recent_puts_are_taken_once_and_load_skips_expired() -> None:
    w = IdempotencyWindow(1000)
    for i in range(5):
        w.put(f"k{i}", 100 + i, result(i))
    taken = w.take_recent()
    assert taken == [(f"k{i}", 100 + i, result(i)) for i in range(5)]
    assert w.take_recent() == []
    w.put("k5", 105, result(5))
    w.give_back(taken[3:])  # a snapshot that failed: its entries go first next time, in order
    assert [k for k, _, _ in w.take_recent()] == ["k3", "k4", "k5"]
    w.expire(1102)  # k0 and k1 are older than the 1000 ms window
    assert w.get("k1", 1102) is None and w.get("k2", 1102) == result(2)

    again = IdempotencyWindow(1000)
    again.load(["a", "b", "c"], [10, 20, 30], [result(1), result(2), result(3)], since_ms=20)
    assert len(again) == 2 and again.get("a", 0) is None and again.get("b", 0) == result(2)
    assert again.take_recent() == []  # loaded entries are on disk already: no segment repeats them
    again.put("d", 40, result(4))
    again.load(["b"], [50], [result(5)], since_ms=0)  # a key seen again later is the newest entry
    assert list(again._entries) == ["c", "d", "b"] and again.get("b", 0) == result(5)

    twice = IdempotencyWindow(1000)  # a key that expired and was published again sits in two segments
    twice.load(["x", "y", "x"], [1, 2, 3], [result(1), result(2), result(3)], since_ms=0)
    assert list(twice._entries.items()) == [("y", (2, result(2))), ("x", (3, result(3)))]
    disabled = IdempotencyWindow(0)
    disabled.put("k", 1, result(1))
    assert len(disabled) == 0 and disabled.take_recent() == []


def test_segments_round_trip_in_position_order(tmp_path: Path) -> None:
    snaps = WindowSnapshots(tmp_path / "dedup")
    snaps.write(0, 500, entries(["a", "b"], [10, 11], [result(0), result(1)]), expired_before=0)
    snaps.write(500, 900, entries(["c"], [12], [result(2)]), expired_before=0)
    assert sorted(p.name for p in (tmp_path / "dedup").iterdir()) == [
        "00000000000000000500.json", "00000000000000000900.json"]

    loaded = WindowSnapshots(tmp_path / "dedup").load(end_position=900)
    assert loaded is not None
    assert (loaded.position, loaded.segments) == (900, 2)
    assert (loaded.keys, loaded.timestamps, loaded.results) == (["a", "b", "c"], [10, 11, 12],
                                                                [result(0), result(1), result(2)])


def test_expired_segments_go_but_the_newest_stays(tmp_path: Path) -> None:
    snaps = WindowSnapshots(tmp_path / "dedup")
    snaps.write(0, 100, entries(["old"], [10], [result(0)]), expired_before=0)
    snaps.write(100, 200, entries([], [], []), expired_before=0)  # the log moved, no new key
    snaps.write(200, 300, entries([], [], []), expired_before=11)  # "old" expired: only the newest is needed now
    assert [p.name for p in (tmp_path / "dedup").iterdir()] == ["00000000000000000300.json"]
    assert snaps.position == 300
    snaps.write(300, 400, entries(["new"], [20], [result(1)]), expired_before=11)
    snaps.write(400, 500, entries([], [], []), expired_before=11)  # "new" is still inside the window: kept
    assert sorted(p.name for p in (tmp_path / "dedup").iterdir()) == [
        "00000000000000000400.json", "00000000000000000500.json"]
    loaded = WindowSnapshots(tmp_path / "dedup").load(end_position=500)
    assert loaded is not None and loaded.keys == ["new"] and loaded.position == 500


def test_segments_past_the_log_end_are_dropped_and_the_scan_starts_before_them(tmp_path: Path) -> None:
    """After a power cut the log may end before positions a segment describes (it was fsynced later
    than the segment): those keys may name lost records, and the positions will be reused."""
    snaps = WindowSnapshots(tmp_path / "dedup")
    snaps.write(0, 100, entries(["kept"], [10], [result(0)]), expired_before=0)
    snaps.write(100, 250, entries(["lost"], [11], [result(150)]), expired_before=0)
    loaded = WindowSnapshots(tmp_path / "dedup").load(end_position=200)
    assert loaded is not None and loaded.position == 100 and loaded.keys == ["kept"]
    assert [p.name for p in (tmp_path / "dedup").iterdir()] == ["00000000000000000100.json"]
    assert WindowSnapshots(tmp_path / "dedup").load(end_position=50) is None  # nothing usable: scan it all
    assert list((tmp_path / "dedup").iterdir()) == []


def test_an_unreadable_segment_means_a_full_scan(tmp_path: Path) -> None:
    snaps = WindowSnapshots(tmp_path / "dedup")
    snaps.write(0, 100, entries(["a"], [10], [result(0)]), expired_before=0)
    snaps.write(100, 200, entries(["b"], [11], [result(1)]), expired_before=0)
    (tmp_path / "dedup" / "00000000000000000100.json").write_bytes(b'{"format": 1, "to": 100, "keys": ["a"')
    (tmp_path / "dedup" / "00000000000000000300.tmp").write_bytes(b"half a write")
    assert WindowSnapshots(tmp_path / "dedup").load(end_position=200) is None
    assert list((tmp_path / "dedup").iterdir()) == []  # so the next start does not trust the rest either


def test_a_segment_is_plain_json_with_three_columns(tmp_path: Path) -> None:
    snaps = WindowSnapshots(tmp_path / "dedup")
    snaps.write(7, 100, entries(["k"], [10], [result(3)]), expired_before=0)
    body = orjson.loads((tmp_path / "dedup" / "00000000000000000100.json").read_bytes())
    assert body == {"format": 2, "from": 7, "to": 100, "keys": ["k"], "timestamps": [10],
                    "results": [result(3).decode()]}


def test_segments_are_owner_only_under_an_open_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        WindowSnapshots(tmp_path / "dedup").write(0, 500, entries(["a"], [10], [result(0)]), expired_before=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "dedup").stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "dedup").iterdir()] == [0o600]


def test_a_format_1_segment_is_read_with_its_keys_scoped(tmp_path: Path) -> None:
    directory = tmp_path / "dedup"
    directory.mkdir()
    old = {"format": 1, "from": 0, "to": 100, "keys": ["a", "b", "c"], "timestamps": [1, 2, 3],
           "results": [result(1).decode(), result(2).decode(), result(3).decode()]}
    (directory / WindowSnapshots.file_name(100)).write_bytes(orjson.dumps(old))
    scopes = {"a": "x/ex/", "c": "x//"}  # b's message is gone from the log: it cannot be scoped

    loaded = WindowSnapshots(directory).load(200, lambda key, _: scopes[key] + key if key in scopes else None)
    assert loaded is not None
    assert (loaded.keys, loaded.timestamps, loaded.results) == (["x/ex/a", "x//c"], [1, 3], [result(1), result(3)])
