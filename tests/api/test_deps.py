"""app/api/deps.py: the JSON answers of the routes and the plain ASGI routes' answers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from chunkmq.api import deps
from chunkmq.broker.broker import Broker


def test_json_writes_what_orjson_cannot_as_text() -> None:
    r = deps.json({"at": datetime(2026, 1, 2, tzinfo=UTC), "path": Path("/d/x"), "n": 1}, status=201)
    assert r.status_code == 201 and r.media_type == "application/json"
    assert orjson.loads(r.body) == {"at": "2026-01-02T00:00:00+00:00", "path": "/d/x", "n": 1}


def test_raw_json_sends_the_bytes_as_given() -> None:
    r = deps.raw_json(b'{"a":1}', 409)
    assert (r.status_code, r.body, r.headers["content-type"], r.headers["content-length"]) == (
        409, b'{"a":1}', "application/json", "7")


@pytest.mark.anyio
async def test_send_body_and_send_json_answer_through_asgi() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/json":
            await deps.send_json(send, b'{"ok":true}', status=202)
        else:
            await deps.send_body(send, b"\x00\x01\x02", "application/octet-stream", [(b"x-extra", b"1")])

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        r = await client.get("/json")
        assert (r.status_code, r.json(), r.headers["content-type"], r.headers["content-length"]) == (
            202, {"ok": True}, "application/json", "11")
        r = await client.get("/raw")
        assert (r.status_code, r.content, r.headers["x-extra"], r.headers["content-length"]) == (
            200, b"\x00\x01\x02", "1", "3")


@pytest.mark.anyio
async def test_broker_of_is_the_running_apps_broker(local_api: httpx.AsyncClient) -> None:
    app = local_api.app  # type: ignore[attr-defined]
    broker = deps.broker_of(Request({"type": "http", "app": app}))
    assert isinstance(broker, Broker) and broker is app.state.broker
