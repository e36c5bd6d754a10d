"""One real chunkmq server per adapter test module (auth off), as the benchmark's peers run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.peers.server import Endpoint
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    server = ServerProcess(tmp_path_factory.mktemp("chunkmq") / "data", CHUNKMQ_AUTH="off").start()
    try:
        yield Endpoint("chunkmq", server.port, server.port)
    finally:
        server.stop()
