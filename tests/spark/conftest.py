"""One real broker for the Spark tests (the Spark session is tests/conftest.py's); tests use unique
queue names so they do not meet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("spark-broker")) / "data"
    proc = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="1048576").start()
    yield proc
    proc.stop()


@pytest.fixture
def api(broker: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client



def fill(api: httpx.Client, queue: str, count: int, start: int = 0, batch: int = 1000, **extra: Any) -> None:
    """Publish messages m<start>..m<start+count-1> straight to a (declared) queue."""
    api.put(f"/api/v1/queues/{queue}").raise_for_status()
    for first in range(start, start + count, batch):
        messages = [{"body": f"m{i}", **extra} for i in range(first, min(first + batch, start + count))]
        api.post(f"/api/v1/queues/{queue}/publish", json={"messages": messages}).raise_for_status()


def bodies(api: httpx.Client, queue: str) -> list[str]:
    """Every text body of a queue, in offset order (through the JSON browse endpoint)."""
    out: list[str] = []
    offset = 0
    while True:
        page = api.get(f"/api/v1/queues/{queue}/messages", params={"offset": offset, "limit": 10_000}).json()
        out += [m["body"] for m in page["messages"]]
        if not page["messages"]:
            return out
        offset = page["next_offset"]
