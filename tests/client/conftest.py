from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import ServerProcess


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One broker per test module (auth off); tests use unique names so they do not meet."""
    proc = ServerProcess(Path(tmp_path_factory.mktemp("client")) / "data", CHUNKMQ_AUTH="off").start()
    yield proc
    proc.stop()

