from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import ServerProcess


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One broker per test module (auth off, tiny chunks); tests use unique names so they do not meet."""
    data = Path(tmp_path_factory.mktemp("broker")) / "data"
    proc = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="1048576",
                         CHUNKMQ_INDEX_CHUNK_ENTRIES="1000").start()
    yield proc
    proc.stop()


@pytest.fixture
def api(shared_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_server.url, timeout=30) as client:
        yield client

