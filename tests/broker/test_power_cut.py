"""Simulated power cuts with fsync=interval: a group never skips a message that exists after recovery.

The data directory lives on an ext4 file system in a loop-mounted image file. A power cut is: freeze
the server (SIGSTOP), copy the image file, kill the server. The copy holds what the kernel had
written to the "device" (fsynced data, plus whatever writeback happened to flush), not the page
cache of the mounted file system, as after a real power cut. The next cycle mounts the copy, starts
a server on it and checks the group against the recovered log, then loads it again and cuts again.

Needs root (mount) and loop devices, which the CI machine has.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.client import ok
from tests.server import ServerProcess

CYCLES = 4


class _Image:
    """An ext4 image file mounted on a directory (and unmounted on close)."""

    def __init__(self, path: Path, mountpoint: Path) -> None:
        self.path = path
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(path), str(mountpoint)], check=True, capture_output=True)

    def close(self) -> None:
        subprocess.run(["umount", str(self.mountpoint)], check=True, capture_output=True)


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "disk-0.img"
    subprocess.run(["truncate", "-s", "160M", str(path)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(path)], check=True, capture_output=True)
    yield path


def _load(url: str, seconds: float, stop_at: float) -> None:
    """A publisher and a consumer (pull, then cumulative ack) until `seconds` have passed."""
    stop = threading.Event()

    def publish() -> None:
        with httpx.Client(base_url=url, timeout=10) as api:
            n = 0
            while not stop.is_set():
                body = {"messages": [{"body": f"m{n}-{j}"} for j in range(20)]}
                try:
                    api.post("/api/v1/queues/q/publish", json=body)
                except httpx.HTTPError:
                    return
                n += 1

    def consume() -> None:
        with httpx.Client(base_url=url, timeout=10) as api:
            ack: dict[str, int] | None = None
            while not stop.is_set():
                body: dict[str, object] = {"max_messages": 37, "wait_ms": 50}
                if ack:
                    body["ack"] = ack
                try:
                    page = api.post("/api/v1/queues/q/groups/g/pull", json=body).json()["messages"]
                except (httpx.HTTPError, KeyError, ValueError):
                    return
                ack = {"up_to": page[-1]["offset"] + 1} if page else None

    threads = [threading.Thread(target=publish), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    del stop_at


def test_power_cuts_never_leave_a_group_past_the_log(tmp_path: Path, image: Path) -> None:
    rng = random.Random(11)
    env = {"CHUNKMQ_AUTH": "off", "CHUNKMQ_FSYNC": "interval", "CHUNKMQ_CHUNK_SIZE": str(1 << 20),
           "CHUNKMQ_INDEX_CHUNK_ENTRIES": "65536", "CHUNKMQ_LOG_LEVEL": "warning"}
    current = image
    for cycle in range(CYCLES + 1):
        mounted = _Image(current, tmp_path / f"mnt-{cycle}")
        server = ServerProcess(mounted.mountpoint / "data", **env)
        try:
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as api:
                if cycle == 0:
                    ok(api.put("/api/v1/queues/q", json={}), 201)
                    ok(api.put("/api/v1/queues/q/groups/g", json={}), 201)
                else:
                    _check_recovered(api, server)
            if cycle == CYCLES:
                server.stop()
                break
            loader = threading.Thread(target=_load, args=(server.url, rng.uniform(1.0, 2.5), 0.0))
            loader.start()
            time.sleep(rng.uniform(0.6, 2.0))
            assert server.proc is not None
            server.proc.send_signal(signal.SIGSTOP)  # the power cut: nothing more reaches the disk
            copy = tmp_path / f"disk-{cycle + 1}.img"
            # sparse: only the blocks the file system used, not 160 MB of zeros
            subprocess.run(["cp", "--sparse=always", str(current), str(copy)], check=True)
            server.kill()
            loader.join(30)
            current = copy
        finally:
            server.kill()
            mounted.close()
        if cycle:
            (tmp_path / f"disk-{cycle}.img").unlink(missing_ok=True)


def _check_recovered(api: httpx.Client, server: ServerProcess) -> None:
    """The group's position is within the recovered log (it was never saved past the durable end),
    and every message that exists at or after its floor, old or new, is delivered to it."""
    assert "clamped" not in server.log(), server.log()
    queue = ok(api.get("/api/v1/queues/q"))
    group = ok(api.get("/api/v1/queues/q/groups/g"))
    end = queue["next_offset"]
    assert group["ack_floor"] <= group["next_offset"] <= end
    ok(api.post("/api/v1/queues/q/publish", json={"messages": [{"body": f"after-{i}"} for i in range(50)]}))
    assert ok(api.get("/api/v1/queues/q/groups/g"))["lag"] == end + 50 - group["ack_floor"]
    seen: list[int] = []
    pull = {"max_messages": 1000, "consumer": "check"}
    while page := ok(api.post("/api/v1/queues/q/groups/g/pull", json=pull))["messages"]:
        seen.extend(m["offset"] for m in page)
        ok(api.post("/api/v1/queues/q/groups/g/ack", json={"up_to": page[-1]["offset"] + 1}))
    assert seen == list(range(group["ack_floor"], end + 50))
