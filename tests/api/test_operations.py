"""Operations routes against a real server: the files of the data directory are the owner's alone,
and the chunk listing names files relative to the data directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from tests.api.client import ok
from tests.server import ServerProcess
from tests.storage.test_files import modes, owner_only


def test_data_directory_is_owner_only_and_chunks_are_listed_relative(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "dedup").mkdir(mode=0o755)  # as an older version left it: tightened on start
    foreign = data / "notes.txt"  # not ours: left alone
    foreign.write_text("x")
    foreign.chmod(0o644)
    server = ServerProcess(data, CHUNKMQ_CHUNK_SIZE="65536", CHUNKMQ_INDEX_CHUNK_ENTRIES="100",
                           CHUNKMQ_DEDUP_SNAPSHOT_SECONDS="0.1").start()
    try:
        token = (data / "admin-token").read_text().strip()
        with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"}, timeout=30) as api:
            ok(api.put("/api/v1/queues/q", json={}), 201)
            for i in range(20):  # several chunks and index files, keyed messages for the dedup snapshots
                batch = [{"body": "x" * 200, "routing_key": "q", "idempotency_key": f"{i}-{j}"} for j in range(20)]
                ok(api.post("/api/v1/exchanges/amq.default/publish", json={"messages": batch}))
            ok(api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 10}))
            deadline = time.monotonic() + 10
            while not any((data / "dedup").glob("*.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
            chunks = ok(api.get("/api/v1/storage/chunks"))
        assert len(chunks) > 1
        for c in chunks:
            assert not os.path.isabs(c["file"]) and str(data) not in c["file"], c
            assert (data / c["file"]).is_file(), c
    finally:
        server.stop()
    found = modes(data)
    kinds = {name.split(os.sep)[0] for name in found}
    assert {"meta.db", "admin-token", "LOCK", "store", "dedup"} <= kinds, sorted(found)
    assert any(name.endswith(".chunk") for name in found) and any(name.endswith(".idx") for name in found)
    assert os.path.join("store", "checkpoint") in found
    assert found["notes.txt"] == 0o644
    wrong = owner_only(data)
    assert wrong.pop("notes.txt") == oct(0o644)
    assert not wrong, wrong
