"""Operations routes against a real server: the files of the data directory are the owner's alone,
and the chunk listing names files relative to the data directory."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import httpx

from tests.api.client import ok
from tests.server import ServerProcess


def _modes(root: Path) -> dict[str, int]:
    """Permission bits of the data directory and of every directory and file under it."""
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


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
    modes = _modes(data)
    kinds = {name.split(os.sep)[0] for name in modes}
    assert {"meta.db", "admin-token", "LOCK", "store", "dedup"} <= kinds, sorted(modes)
    assert any(name.endswith(".chunk") for name in modes) and any(name.endswith(".idx") for name in modes)
    assert os.path.join("store", "checkpoint") in modes
    assert modes.pop("notes.txt") == 0o644
    wrong = {name: oct(mode) for name, mode in modes.items()
             if mode != (0o700 if (data / name).is_dir() else 0o600)}
    assert not wrong, wrong
