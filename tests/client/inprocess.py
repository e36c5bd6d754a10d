"""The whole app in this process (lifespan running, auth off) for the client's sans-I/O parts: a
client `Call` is sent over httpx.ASGITransport and its answer finished as the real clients do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import httpx

from chunkmq.client._calls import Call
from chunkmq.client._http import Response
from chunkmq.config import Settings
from chunkmq.main import create_app

T = TypeVar("T")


@contextlib.asynccontextmanager
async def local_app(data_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(data_dir=data_dir, auth="off", chunk_size=1 << 20, index_chunk_entries=1000)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def answer(client: httpx.AsyncClient, call: Call[Any]) -> Response:
    content, headers = call.content()
    r = await client.request(call.method, call.target, content=content, headers=headers)
    return Response(r.status_code, r.content, r.headers)  # type: ignore[arg-type]  # .get() is all it needs


async def run(client: httpx.AsyncClient, call: Call[T]) -> T:
    """What Client._run does, over the in-process app."""
    return call.finish(await answer(client, call))
