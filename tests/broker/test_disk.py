"""The disk budget (app/broker/disk.py) with real server processes: refuse by default, drop_oldest
only when asked (and then counted, warned about and exported), everything in the data directory counted."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from chunkmq.broker.disk import DiskGuard
from chunkmq.config import Settings
from chunkmq.storage import NewMessage, Store, StoreOptions, files
from tests.api.client import bind, error, exchange, ok, queue
from tests.server import ServerProcess

SMALL = {
    "CHUNKMQ_AUTH": "off",
    "CHUNKMQ_CHUNK_SIZE": "65536",
    "CHUNKMQ_INDEX_CHUNK_ENTRIES": "1024",
    "CHUNKMQ_RETENTION_INTERVAL_SECONDS": "0.2",
}


def allocated(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def metric(api: httpx.Client, name: str, **labels: str) -> float | None:
    text = api.get("/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # the exposition sorts labels
    match = re.search(rf"^{name}{{{want}}} (\S+)$" if labels else rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def batch(start: int, n: int = 100) -> dict[str, object]:
    # messages of about 160 bytes on disk: the budget is reached after 10,000 or so of them
    return {"messages": [{"body": f"m{i:06d}-" + "x" * 128} for i in range(start, start + n)]}


def test_at_the_budget_publishes_get_507_and_nothing_unconsumed_is_deleted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, CHUNKMQ_DISK_BUDGET_BYTES="2000000", **SMALL).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            ok(api.put("/api/v1/queues/q/groups/g", json={}), 201)
            assert ok(api.get("/readyz")) == {"status": "ready"}
            time.sleep(1.5)  # a measurement after the declarations (they and their audit grew meta.db)
            accepted = refused = 0
            for start in range(0, 15_000, 100):
                response = api.post("/api/v1/queues/q/publish", json=batch(start))
                if response.status_code == 200:
                    assert refused == 0, "a publish was accepted after the budget refused one"
                    accepted += 100
                else:
                    assert "disk budget" in error(response, 507, "storage_full")
                    refused += 1
            assert 5_000 < accepted < 15_000 and refused
            # every message that got 200 is there, in order; nothing was dropped or missed
            got = [m["body"] for o in range(0, accepted, 1000) for m in ok(
                api.get("/api/v1/queues/q/messages", params={"offset": o, "limit": 1000}))["messages"]]
            assert got == [f"m{i:06d}-" + "x" * 128 for i in range(accepted)]
            info = ok(api.get("/api/v1/queues/q"))
            assert info["first_offset"] == 0 and info["messages_dropped"] == 0
            assert ok(api.get("/api/v1/queues/q/groups/g"))["missed"] == 0
            assert allocated(data) <= 2_000_000  # everything under the data directory, by blocks
            ready = api.get("/readyz")
            assert ready.status_code == 503 and "disk budget" in ready.json()["reason"]
            # once the group is done and retention frees its chunks, publishing works again
            ok(api.post("/api/v1/queues/q/groups/g/seek", json={"offset": accepted}))  # the group is done
            assert wait_until(lambda: api.get("/readyz").status_code == 200)
            response = ok(api.post("/api/v1/queues/q/publish", json=batch(accepted)))
            assert response["results"][0]["routed"] == [{"queue": "q", "offset": accepted}]
    finally:
        server.stop()


def test_drop_oldest_deletes_and_counts_missed_at_once(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", CHUNKMQ_DISK_BUDGET_BYTES="1000000", CHUNKMQ_DISK_BUDGET_POLICY="drop_oldest", **SMALL
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            ok(api.put("/api/v1/queues/q/groups/g", json={}), 201)
            for start in range(0, 10_000, 100):
                ok(api.post("/api/v1/queues/q/publish", json=batch(start)))  # never refused
            assert wait_until(lambda: ok(api.get("/api/v1/queues/q"))["first_offset"] > 0)
            time.sleep(0.5)  # let a pass finish after the one that moved the floor
            first = ok(api.get("/api/v1/queues/q"))["first_offset"]
            info = ok(api.get("/api/v1/queues/q"))
            # the group never pulled: its missed count was raised by retention, not by a delivery
            group = ok(api.get("/api/v1/queues/q/groups/g"))
            assert group["missed"] == info["messages_dropped"] == first
            page = ok(api.get("/api/v1/queues/q/messages", params={"offset": 0, "limit": 1}))
            assert page["messages"][0]["offset"] == first
            assert metric(api, "chunkmq_queue_messages_dropped_total", queue="q") == first
            assert metric(api, "chunkmq_group_messages_missed_total", queue="q", group="g") == first
            assert ok(api.get("/readyz")) == {"status": "ready"}  # drop_oldest never refuses
        warnings = [line for line in server.log().splitlines() if "WARNING" in line and "'q'" in line]
        assert warnings and all("drop_oldest" in line for line in warnings)
        deleted = (re.search(r": (\d+) messages deleted", line) for line in warnings)
        assert sum(int(m.group(1)) for m in deleted) == first  # type: ignore[union-attr]
    finally:
        server.stop()


def test_limits_count_missed_at_once(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", **SMALL).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "ring", max_messages=50)
            ok(api.put("/api/v1/queues/ring/groups/g", json={}), 201)
            ok(api.post("/api/v1/queues/ring/publish", json=batch(0, 80)))
            assert ok(api.get("/api/v1/queues/ring/groups/g"))["missed"] == 30
            assert ok(api.get("/api/v1/queues/ring"))["messages_dropped"] == 30
            assert metric(api, "chunkmq_group_messages_missed_total", queue="ring", group="g") == 30
            assert wait_until(lambda: "max_messages" in server.log())
        assert re.search(r"WARNING .*'ring': 30 messages deleted by max_messages", server.log())
    finally:
        server.stop()


def test_the_budget_counts_index_files(tmp_path: Path) -> None:
    """Tiny messages fanned out to 30 queues: the indexes take more than the log. The publish is
    refused while the chunk files alone are far under the budget."""
    data = tmp_path / "data"
    budget = 2_500_000
    server = ServerProcess(data, CHUNKMQ_DISK_BUDGET_BYTES=str(budget), **SMALL).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            exchange(api, "fan", "fanout")
            for i in range(30):
                queue(api, f"q{i}")
                bind(api, "fan", f"q{i}")
            time.sleep(1.5)  # a measurement after the declarations (SQLite's WAL grew with them)
            status = 200
            sent = 0
            while status == 200 and sent < 100_000:
                response = api.post("/api/v1/exchanges/fan/publish", json={"messages": [{"body": "x"}] * 100})
                status = response.status_code
                sent += 100
            error(response, 507, "storage_full")
            chunks = allocated(data / "store" / "log")
            indexes = allocated(data / "store" / "queues")
            assert chunks > 0 and indexes > chunks / 2
            assert allocated(data) <= budget  # counting chunk files only would have gone on
            assert api.get("/readyz").status_code == 503
    finally:
        server.stop()


def test_a_really_full_disk_makes_the_server_unready_until_space_is_freed(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    server = ServerProcess(mnt / "data", **SMALL)
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            ok(api.put("/api/v1/queues/q/groups/g", json={}), 201)
            accepted = 0
            while (response := api.post("/api/v1/queues/q/publish", json=batch(accepted))).status_code == 200:
                accepted += 100
            assert "disk is full" in error(response, 507, "storage_full")
            assert accepted > 1000
            ready = api.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "storage_full"
            assert ok(api.get("/api/v1/queues/q"))["messages"] == accepted
            ok(api.post("/api/v1/queues/q/groups/g/seek", json={"offset": accepted}))  # the group is done
            assert wait_until(lambda: api.get("/readyz").status_code == 200)
            ok(api.post("/api/v1/queues/q/publish", json=batch(accepted)))
    finally:
        server.stop()
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_measurement_walks_only_the_index_directories_that_changed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: after the first measurement, only the queues the store reports changed have their
    index directory measured again, and the total stays what a full walk finds."""
    store = Store.open(tmp_path / "store", StoreOptions(chunk_size=65536, index_chunk_entries=1024))
    try:
        for q in range(1, 21):
            store.create_queue(q)
        guard = DiskGuard(Settings(data_dir=tmp_path), store)
        measured: list[str] = []
        allocated_in = files.allocated_in

        def spy(directory: Path) -> int:
            measured.append(directory.name)
            return allocated_in(directory)

        monkeypatch.setattr(files, "allocated_in", spy)
        guard.measure_now()
        assert sorted(measured) == [f"{q:010d}" for q in range(1, 21)] and guard.used == allocated(tmp_path)
        store.append([NewMessage(b"x" * 100, [4, 7])])  # index files created in queues 4 and 7
        store.delete_queue(9)
        measured.clear()
        guard.measure_now()
        assert sorted(measured) == ["0000000004", "0000000007", "0000000009"] and guard.used == allocated(tmp_path)
        measured.clear()
        guard.measure_now()
        assert measured == [] and guard.used == allocated(tmp_path)
        assert store.disk_bytes() == allocated(tmp_path / "store" / "log") + allocated(tmp_path / "store" / "queues")
    finally:
        store.close()
