"""The browser protections of a server without tokens (app/api/guard.py), on a tiny app behind the
real middleware: DNS rebinding (Host), foreign Origin and non-JSON bodies on /api/v1 changes."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from chunkmq.api.guard import Guard, LocalChecks
from chunkmq.wire import codes


async def ok(_: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


APP = Guard(Starlette(routes=[Route("/api/v1/queues/q", ok, methods=["GET", "PUT"]), Route("/", ok)]),
            [LocalChecks("127.0.0.1").check])


def _answers(requests: list[tuple[str, str, dict[str, str]]]) -> list[tuple[int, str]]:
    async def main() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=APP), base_url="http://127.0.0.1:8000") as c:
            out = []
            for method, path, headers in requests:
                r = await c.request(method, path, headers=headers, content=b"{}")
                out.append((r.status_code, r.json()["error"]["code"] if r.status_code != 200 else "ok"))
            return out

    return asyncio.run(main())


def test_the_host_must_be_the_bound_address_or_localhost() -> None:
    assert _answers([
        ("GET", "/", {}), ("GET", "/", {"host": "localhost:8000"}), ("GET", "/", {"host": "[::1]:8000"}),
        ("GET", "/", {"host": "attacker.example:8000"}), ("GET", "/", {"host": ""}),
    ]) == [(200, "ok")] * 3 + [(400, codes.INVALID_HOST)] * 2


def test_changes_need_the_same_origin_and_a_json_body() -> None:
    json = {"content-type": "application/json"}
    assert _answers([
        ("PUT", "/api/v1/queues/q", json),
        ("PUT", "/api/v1/queues/q", {**json, "origin": "http://127.0.0.1:8000"}),
        ("PUT", "/api/v1/queues/q", {**json, "origin": "http://evil.example"}),
        ("PUT", "/api/v1/queues/q", {**json, "origin": "null"}),
        ("PUT", "/api/v1/queues/q", {"content-type": "text/plain"}),
        ("GET", "/api/v1/queues/q", {"origin": "http://evil.example"}),  # a read changes nothing
    ]) == [(200, "ok"), (200, "ok"), (403, codes.CROSS_ORIGIN), (403, codes.CROSS_ORIGIN),
           (415, codes.UNSUPPORTED_MEDIA_TYPE), (200, "ok")]
