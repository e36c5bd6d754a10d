"""OPTIONS, HEAD and Allow (app/api/allow.py): every method of a path, whichever route has it (in
process), and HEAD answered by a real server with the GET's head and no body."""

from __future__ import annotations

import asyncio
import socket

import httpx

from chunkmq.config import Settings
from chunkmq.main import create_app
from tests.server import ServerProcess


def call(*requests: tuple[str, str]) -> list[httpx.Response]:
    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(Settings(auth="off")))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.request(method, path) for method, path in requests]

    return asyncio.run(main())


def test_options_lists_every_method_of_the_path() -> None:
    paths = {
        "/api/v1/queues/q": "DELETE, GET, HEAD, OPTIONS, PATCH, PUT",
        "/api/v1/queues": "GET, HEAD, OPTIONS",
        "/api/v1/exchanges/x/publish": "OPTIONS, POST",  # a plain ASGI route
        "/api/v1/queues/q/groups/g/stream": "GET, OPTIONS",  # a WebSocket route: its handshake is a GET
        "/api/v1/alerts/rules/7": "DELETE, GET, HEAD, OPTIONS, PUT",
    }
    for (path, allow), response in zip(paths.items(), call(*[("OPTIONS", p) for p in paths]), strict=True):
        assert response.status_code == 204, (path, response.text)
        assert response.headers["allow"] == allow, path
        assert response.content == b""


def test_405_names_every_method_and_options_of_an_unknown_path_is_404() -> None:
    wrong, nowhere = call(("POST", "/api/v1/queues/q"), ("OPTIONS", "/api/v1/nothing/here"))
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong.headers["allow"] == "DELETE, GET, HEAD, OPTIONS, PATCH, PUT"
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"


def test_head_is_a_get_without_its_body(server: ServerProcess) -> None:
    """Over a real socket: uvicorn sends the GET's status and headers (Content-Length included) and
    no body, and the connection stays usable for the next request."""
    with httpx.Client(base_url=server.url) as api:
        assert api.put("/api/v1/queues/q", json={}).status_code == 201
        get = api.get("/api/v1/queues/q")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"HEAD /api/v1/queues/q HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     b"HEAD /api/v1/queues/missing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     b"GET /api/v1/queues/q HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, missing, rest = raw.split(b"HTTP/1.1 ")[1:]
    assert head.startswith(b"200 ") and head.endswith(b"\r\n\r\n")  # the head alone, no body
    assert f"content-length: {len(get.content)}".encode() in head.lower()
    assert missing.startswith(b"404 ") and missing.endswith(b"\r\n\r\n")
    assert rest.startswith(b"200 ") and rest.endswith(get.content)


def test_a_name_with_a_slash_is_invalid_name_not_an_unknown_path() -> None:
    paths = ("/api/v1/queues/<script>alert(1)</script>", "/api/v1/queues/a%2Fb", "/api/v1/exchanges/x%2Fy",
             "/api/v1/queues/q/groups/<b>g</b>")
    for path, response in zip(paths, call(*[("PUT", p) for p in paths]), strict=True):
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["code"] == "invalid_name", path
    unknown, = call(("PUT", "/api/v1/queues/q/unknown"))  # valid names, no such route: still 404
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
