"""The idempotency window survives kill -9 without rescanning it (issue #6): the broker writes the keys
it adds to data/dedup/ every CHUNKMQ_DEDUP_SNAPSHOT_SECONDS, and a restart loads them and scans only
the log written after the newest segment. A real server process, killed with SIGKILL."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.api.client import ok, publish, queue
from tests.server import ServerProcess

_RECOVERY = re.compile(
    r"idempotency window rebuilt: (\d+) keys; (?:(\d+) from (\d+) snapshot segments|no usable snapshot), "
    r"(\d+) (?:more )?from (\d+) records scanned (?:from position (\d+)|over the window)"
)


def start(data: Path) -> ServerProcess:
    # info: the broker logs how it rebuilt the window; a 1 s snapshot period, the default.
    return ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_LOG_LEVEL="info",
                         CHUNKMQ_DEDUP_SNAPSHOT_SECONDS="1").start()


def recovery(server: ServerProcess) -> dict[str, Any]:
    """The last start's rebuild of the window, from the server log."""
    found = _RECOVERY.findall(server.log())
    assert found, server.log()[-3000:]
    keys, snapshot_keys, segments, scanned_keys, records, scanned_from = found[-1]
    return {"keys": int(keys), "segments": int(segments or 0), "snapshot_keys": int(snapshot_keys or 0),
            "scanned_from": int(scanned_from) if scanned_from else None,
            "records_scanned": int(records), "scanned_keys": int(scanned_keys)}


def keyed(q: str, keys: list[str]) -> list[dict[str, Any]]:
    return [{"body": f"body of {k}", "routing_key": q, "idempotency_key": k} for k in keys]


def publish_keys(api: httpx.Client, q: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """Publish one message per key (batches of 1000); returns each key's result."""
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(keys), 1000):
        batch = keys[i : i + 1000]
        out.update(zip(batch, publish(api, "amq.default", *keyed(q, batch))["results"], strict=True))
    return out


def wait_for_segment_past(data: Path, position: int, timeout: float = 5.0) -> None:
    """Until a snapshot segment covers the log up to `position` (segment names are their `to`)."""
    deadline = time.monotonic() + timeout
    while not any(int(p.stem) > position for p in (data / "dedup").glob("*.json")):
        assert time.monotonic() < deadline, sorted((data / "dedup").glob("*"))
        time.sleep(0.01)


def last_position(results: dict[str, dict[str, Any]]) -> int:
    return max(int(r["id"], 16) for r in results.values())  # a message id is its record's log position


def assert_duplicates(api: httpx.Client, q: str, originals: dict[str, dict[str, Any]]) -> None:
    keys = list(originals)
    before = ok(api.get(f"/api/v1/queues/{q}"))["next_offset"]
    again = publish_keys(api, q, keys)
    for key in keys:
        assert again[key] == {**originals[key], "duplicate": True}, key
    assert ok(api.get(f"/api/v1/queues/{q}"))["next_offset"] == before  # nothing stored twice


def test_keys_from_before_and_after_the_snapshot_survive_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start(data)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            before = publish_keys(api, "q", [f"before-{i}" for i in range(50)])
            wait_for_segment_past(data, last_position(before))
            # Right after a snapshot, so the next one is about a second away: these are only in the log.
            after = publish_keys(api, "q", [f"after-{i}" for i in range(20)])
        server.kill()
        server.start()
        r = recovery(server)
        assert r["segments"] >= 1 and r["snapshot_keys"] == 50
        assert r["scanned_from"] is not None and r["scanned_from"] > last_position(before)
        assert (r["records_scanned"], r["scanned_keys"], r["keys"]) == (20, 20, 70)
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert_duplicates(api, "q", before | after)
            fresh = publish(api, "amq.default", *keyed("q", ["new-key"]))["results"][0]
            assert fresh["duplicate"] is False and fresh["routed"] == [{"queue": "q", "offset": 70}]
    finally:
        server.stop()


def test_after_kill_9_a_restart_with_a_large_keyed_backlog_scans_only_the_tail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start(data)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "backlog")
            backlog = publish_keys(api, "backlog", [f"order-{i}" for i in range(20_000)])
            wait_for_segment_past(data, last_position(backlog))
            tail = publish_keys(api, "backlog", [f"tail-{i}" for i in range(10)])
        server.kill()
        server.start()
        r = recovery(server)
        # The log holds 20,010 keyed records; the restart read the 10 written after the snapshot.
        assert (r["snapshot_keys"], r["records_scanned"], r["scanned_keys"], r["keys"]) == (20_000, 10, 10, 20_010)
        with httpx.Client(base_url=server.url, timeout=30) as api:
            sample = {k: backlog[k] for k in list(backlog)[::100]}
            assert_duplicates(api, "backlog", sample | tail)
    finally:
        server.stop()


def test_a_clean_restart_keeps_the_snapshot_so_a_later_crash_scans_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start(data)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            originals = publish_keys(api, "q", [f"k-{i}" for i in range(300)])
        server.stop()  # the clean shutdown writes the last keys
        server.start()
        assert recovery(server)["records_scanned"] == 0
        server.kill()  # before anything new was published or snapshotted
        server.start()
        r = recovery(server)
        assert (r["snapshot_keys"], r["records_scanned"], r["keys"]) == (300, 0, 300)
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert_duplicates(api, "q", originals)
    finally:
        server.stop()


def test_a_segment_past_the_end_of_the_log_is_not_trusted(tmp_path: Path) -> None:
    """What a power cut can leave: a segment fsynced before the log records it describes. Its keys
    would answer "duplicate" with ids of messages that do not exist."""
    data = tmp_path / "data"
    (data / "dedup").mkdir(parents=True)
    ghost = {"format": 1, "from": 0, "to": 10**9, "keys": ["ghost"], "timestamps": [int(time.time() * 1000)],
             "results": ['{"id":"0000000000000040","routed":[],"duplicate":false}']}
    (data / "dedup" / f"{10**9:020d}.json").write_bytes(orjson.dumps(ghost))
    server = start(data)
    try:
        assert recovery(server)["segments"] == 0
        assert "reach past the log's end" in server.log()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            result = publish(api, "amq.default", *keyed("q", ["ghost"]))["results"][0]
            assert result["duplicate"] is False and result["routed"] == [{"queue": "q", "offset": 0}]
    finally:
        server.stop()


def test_keys_are_scoped_to_the_publish_target_across_a_kill_9(tmp_path: Path) -> None:
    """The same key on another exchange or queue is another message; within a target, a duplicate."""
    data = tmp_path / "data"
    server = start(data)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q3")
            queue(api, "q4")
            ok(api.put("/api/v1/exchanges/x.fanout", json={"type": "fanout"}), 201)
            ok(api.post("/api/v1/bindings", json={"exchange": "x.fanout", "queue": "q4"}), 201)
            keyed = {"messages": [{"body": "a", "idempotency_key": "k"}]}
            first = ok(api.post("/api/v1/queues/q3/publish", json=keyed))
            results = {}
            for attempt in range(2):
                if attempt:  # the second round runs after a crash: the window comes back scoped
                    server.kill()
                    server.start()
                fanout = publish(api, "x.fanout", {"body": "b", "idempotency_key": "k"})["results"][0]
                assert fanout["routed"] == [{"queue": "q4", "offset": 0}]
                assert fanout["duplicate"] is bool(attempt)
                again = ok(api.post("/api/v1/queues/q3/publish", json=keyed))
                assert again["results"][0] == {**first["results"][0], "duplicate": True}
                default = publish(api, "amq.default", {"body": "c", "routing_key": "q3", "idempotency_key": "k"})
                results[attempt] = default["results"][0]
            assert results[0]["duplicate"] is False and results[0]["routed"] == [{"queue": "q3", "offset": 1}]
            assert results[1] == {**results[0], "duplicate": True}
    finally:
        server.stop()


def test_a_snapshot_in_the_old_format_is_read(tmp_path: Path) -> None:
    """Format 1 segments hold bare keys; each is scoped to the exchange its message went through."""
    data = tmp_path / "data"
    server = start(data)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            ok(api.put("/api/v1/exchanges/ex", json={"type": "fanout"}), 201)
            ok(api.post("/api/v1/bindings", json={"exchange": "ex", "queue": "q"}), 201)
            original = publish(api, "ex", {"body": "a", "idempotency_key": "old-1"})["results"][0]
        server.stop()  # the clean shutdown writes the newest segment
        segments = sorted((data / "dedup").glob("*.json"))
        body = orjson.loads(segments[-1].read_bytes())
        assert body["format"] == 2 and body["keys"] == ["x/ex/old-1"]
        for path in segments:
            path.unlink()
        old = {**body, "format": 1, "keys": ["old-1"]}  # as the broker wrote it before keys were scoped
        segments[-1].write_bytes(orjson.dumps(old))
        server.start()
        assert recovery(server)["snapshot_keys"] == 1
        with httpx.Client(base_url=server.url, timeout=30) as api:
            again = publish(api, "ex", {"body": "a", "idempotency_key": "old-1"})["results"][0]
            assert again == {**original, "duplicate": True}
            other = ok(api.post("/api/v1/queues/q/publish",
                                json={"messages": [{"body": "a", "idempotency_key": "old-1"}]}))
            assert other["results"][0]["duplicate"] is False
    finally:
        server.stop()
