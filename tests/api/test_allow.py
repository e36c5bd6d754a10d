"""OPTIONS and Allow (app/api/allow.py): every method of a path, whichever route has it (in process)."""

from __future__ import annotations

import asyncio

import httpx

from app.config import Settings
from app.main import create_app


def call(*requests: tuple[str, str]) -> list[httpx.Response]:
    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(Settings(auth="off")))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.request(method, path) for method, path in requests]

    return asyncio.run(main())


def test_options_lists_every_method_of_the_path() -> None:
    paths = {
        "/api/v1/queues/q": "DELETE, GET, OPTIONS, PATCH, PUT",
        "/api/v1/queues": "GET, OPTIONS",
        "/api/v1/exchanges/x/publish": "OPTIONS, POST",  # a plain ASGI route
        "/api/v1/queues/q/groups/g/stream": "GET, OPTIONS",  # a WebSocket route: its handshake is a GET
        "/api/v1/alerts/rules/7": "DELETE, GET, OPTIONS, PUT",
    }
    for (path, allow), response in zip(paths.items(), call(*[("OPTIONS", p) for p in paths]), strict=True):
        assert response.status_code == 204, (path, response.text)
        assert response.headers["allow"] == allow, path
        assert response.content == b""


def test_405_names_every_method_and_options_of_an_unknown_path_is_404() -> None:
    wrong, nowhere = call(("POST", "/api/v1/queues/q"), ("OPTIONS", "/api/v1/nothing/here"))
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong.headers["allow"] == "DELETE, GET, OPTIONS, PATCH, PUT"
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"
