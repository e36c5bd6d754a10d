"""One real chunkmq server per adapter test module, auth on with its admin token, as the benchmark runs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.peers.server import Endpoint
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    server = ServerProcess(tmp_path_factory.mktemp("chunkmq") / "data").start()
    try:
        token = (server.data_dir / "admin-token").read_text().strip()
        yield Endpoint("chunkmq", server.port, server.port, {"token": token})
    finally:
        server.stop()
