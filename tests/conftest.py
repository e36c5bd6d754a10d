from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh broker with auth off (bound to 127.0.0.1), stopped after the test."""
    proc = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    yield proc
    proc.stop()
