from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

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



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def local_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The whole app (lifespan, auth on) in process over httpx.ASGITransport, as an admin token."""
    async with local_client(tmp_path) as client:
        yield client


@contextlib.asynccontextmanager
async def local_client(tmp_path: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """local_api's client, with these settings besides its own; `client.app` is the app and
    `client.token` the admin token it sends."""
    from chunkmq.config import Settings
    from chunkmq.main import create_app

    config = Settings(**{"data_dir": tmp_path / "data", "chunk_size": 1 << 20, "index_chunk_entries": 1000,
                         **settings})
    application = create_app(config)
    async with application.router.lifespan_context(application):
        token = (config.data_dir / "admin-token").read_text().strip()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://local/api/v1",
                                     headers={"authorization": f"Bearer {token}"}) as client:
            client.app = application  # type: ignore[attr-defined]
            client.token = token  # type: ignore[attr-defined]
            yield client
