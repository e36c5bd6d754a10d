from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.protocol import Protocol

from tests.mailbox import Mailbox
from tests.pg import PgCluster
from tests.s3 import SeaweedS3
from tests.server import ServerProcess
from tests.spark import SPARK_TEST_CONF

pytest_plugins = ["tests.ran_all"]

_names = itertools.count()

# Chunks are preallocated at full size: with the default 256 MiB, the servers of a run (test servers,
# the bench smoke's, in-process brokers) would hold gigabytes of disk. Every server and Settings()
# of the suite reads this unless a test sets its own size; 8 MiB still takes the largest message
# (max_message_bytes is 4 MiB).
os.environ.setdefault("CHUNKMQ_CHUNK_SIZE", str(8 * 1024 * 1024))

# Spark tests share one session (one JVM per worker that runs any): one group for all of them.
SPARK = ("tests/spark/", "tests/bench/test_spark.py")
# The groups that take longest (seconds on an idle two-core machine, `pytest --durations`).
SLOW_GROUPS = (
    "spark",
    "tests/api/test_schemathesis.py",
    "tests/storage/test_crash.py",
    "tests/broker/test_power_cut.py",
    "tests/bench/test_peers.py",
    "tests/web/test_browser.py",
    "tests/broker/test_database_outage.py",
)


def group_of(nodeid: str) -> str:
    """A test's group: its module (so a module-scoped server starts once), or "spark"."""
    path = nodeid.split("::", 1)[0]
    return "spark" if path.startswith(SPARK) else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest groups first (a stable sort: a group's tests keep their order), so that no long
    one is left for the end of a parallel run while the other worker idles."""
    rank = {group: i for i, group in enumerate(SLOW_GROUPS)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` runs on two pytest-xdist workers (addopts in pyproject.toml), which take one
    group at a time, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


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
    from chunkmq.spark.session import session

    conf = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", **SPARK_TEST_CONF}
    s = session("local[2]", "chunkmq-tests", **conf)
    yield s
    s.stop()


CHROMIUM = "/usr/bin/chromium"  # Debian's (make test installs it)
# Without the background-networking flags, Chromium's own connections are refused by this machine's
# closed network, many at a time.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium through Playwright, one per test module (each test opens its own pages)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """One real PostgreSQL server for the whole test run (per worker), removed at the end."""
    cluster = PgCluster().init().start()
    yield cluster
    cluster.remove()


@pytest.fixture(scope="session")
def s3() -> Iterator[SeaweedS3]:
    """One real S3 server (SeaweedFS) for the whole test run (per worker), removed at the end."""
    server = SeaweedS3().start()
    yield server
    server.remove()


@pytest.fixture
def tier_url(s3: SeaweedS3) -> str:
    """CHUNKMQ_TIER_URL of a bucket of this test's own (not created yet)."""
    return f"s3://{s3.bucket_name()}/chunkmq"


@pytest.fixture
def pg_url(pg: PgCluster) -> Iterator[str]:
    """The SQLAlchemy URL of a new, empty PostgreSQL database of this test's own."""
    with pg.database() as url:
        yield url


@pytest.fixture(params=("sqlite", "postgresql"))
def database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Settings.database_url of an in-process app: "" (SQLite in the data directory), or a new
    database on the PostgreSQL server. Parametrizes the tests that use it."""
    if request.param == "sqlite":
        yield ""
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    with cluster.database() as url:
        yield url


@pytest.fixture(scope="module", params=("sqlite", "postgresql"))
def database_env(request: pytest.FixtureRequest) -> Iterator[Callable[[], dict[str, str]]]:
    """Environment for a ServerProcess (each call: one more server's): the metadata in the data
    directory's SQLite file, or in a new database of its own on the PostgreSQL server. Parametrizes
    the modules whose servers use it."""
    if request.param == "sqlite":
        yield dict
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    with contextlib.ExitStack() as databases:
        yield lambda: {"CHUNKMQ_DATABASE_URL": databases.enter_context(cluster.database())}


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps the mails it receives."""
    box = Mailbox()
    box.controller.start()
    yield box
    box.controller.stop()


@pytest.fixture
def websockets_parsed(monkeypatch: pytest.MonkeyPatch) -> Callable[[type[Protocol]], list[bytes]]:
    """`watch(protocol_class)`: the list of every chunk websockets' parser (that class's
    `receive_data`) is given from then on, for tests of what reaches the stream past it."""

    def watch(cls: type[Protocol]) -> list[bytes]:
        parsed: list[bytes] = []
        receive_data = cls.receive_data

        def counted(self: Protocol, data: bytes) -> None:
            parsed.append(bytes(data))
            receive_data(self, data)

        monkeypatch.setattr(cls, "receive_data", counted)
        return parsed

    return watch
