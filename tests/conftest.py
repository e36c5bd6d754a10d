from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mailbox import Mailbox
from tests.server import ServerProcess

_names = itertools.count()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A name unique to this test, valid for exchanges, queues and groups (tests share brokers)."""
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_names)}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh broker with auth off (bound to 127.0.0.1), stopped after the test."""
    proc = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One real local Spark session for the whole test run (starting one takes seconds): UI off,
    two cores, few shuffle partitions."""
    from app.spark.session import session

    s = session("local[2]", "chunkmq-tests", **{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield s
    s.stop()


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps the mails it receives."""
    box = Mailbox()
    box.controller.start()
    yield box
    box.controller.stop()
