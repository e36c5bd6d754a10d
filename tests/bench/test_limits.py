"""bench/limits.py: every figure at a tiny size against a real `chunkmq serve`, and its JSON lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.limits import binary_batch, main, pct, seed_queues


def _rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[dict[str, Any]]:
    main(argv)
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["cpu"] and rows[0]["cores"] >= 1
    assert all("load" in row for row in rows)
    return rows[1:]


def test_binary_batch_is_the_documented_layout() -> None:
    # docs/api.md: count, body lengths (u32), routing key lengths (u16), flags (u8), then the bodies
    assert binary_batch([b"hi", b"abc"]) == (b"\x02\x00\x00\x00" b"\x02\x00\x00\x00\x03\x00\x00\x00"
                                            b"\x00\x00\x00\x00" b"\x01\x01" b"hiabc")
    assert pct([3.0, 1.0, 2.0, 4.0], 0.5) == 3.0 and pct([], 0.99) == 0.0


def test_queues(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, ["queues", "--sizes", "3,6", "--samples", "4"])
    assert [r["queues"] for r in rows] == [3, 6]
    for row in rows:
        assert row["publish_p50_ms"] > 0 and row["pull_p99_ms"] > 0 and row["restart_to_ready_s"] > 0
        assert row["rss_mb"] > 10 and row["console_queues_ms"] > 0 and row["console_dashboard_ms"] > 0
        assert row["list_page_api_ms"] > 0 and row["console_queues_by_messages_ms"] > 0


def test_connections(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, ["connections", "--sizes", "5", "--idle-seconds", "0.3"])
    assert [(r["kind"], r["connections"]) for r in rows] == [("websocket", 5), ("longpoll", 5)]
    for row in rows:
        assert row["rss_held_mb"] > 10 and row["accept_s"] >= 0 and row["idle_cpu_percent"] >= 0
    assert rows[0]["rss_reopened_mb"] > 10


def test_backlog(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, ["backlog", "--minutes", "1", "--messages", "2000", "--batch", "500", "--clients", "1"])
    row = rows[-1]
    assert row["messages"] == 2000
    assert 100 < row["disk_bytes_per_message"] < 1e6  # a fresh store preallocates a whole chunk
    assert row["read_oldest_ms"] > 0 and row["read_oldest_again_ms"] > 0
    assert row["pull_oldest_ms"] > 0 and row["restart_to_ready_s"] > 0


def test_sustained(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, ["sustained", "--minutes", "0.04", "--window", "1", "--probe-seconds", "0.5"])
    assert rows[0]["max_msgs_per_s"] > 0 and rows[0]["target_msgs_per_s"] < rows[0]["max_msgs_per_s"]
    windows = [r for r in rows[1:] if "t_s" in r]
    assert windows and all(w["p99_ms"] >= w["p50_ms"] > 0 and w["rss_mb"] > 10 for w in windows)
    assert rows[-1]["summary"] is True


def test_seed_queues_writes_what_declarations_would(tmp_path: Path) -> None:
    from chunkmq.meta import MetaStore, upgrade
    from chunkmq.storage import files

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    seed_queues(tmp_path, 0, 3)
    seed_queues(tmp_path, 3, 5)  # cumulative, as --sizes are
    with MetaStore(url) as meta:
        snapshot = meta.load()
    assert [q.name for q in snapshot.queues] == [f"q{i:06d}" for i in range(5)]
    assert [(g.queue_id, g.name, g.ack_floor) for g in snapshot.groups] == [(q.id, "g", 0) for q in snapshot.queues]
    assert all(files.queue_dir(tmp_path / "store", q.id).is_dir() for q in snapshot.queues)
