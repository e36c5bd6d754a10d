"""Rendering helpers of the console (app/web/render.py): the display filters, autoescaping of every
template, and the security headers on every page."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from chunkmq.web.render import (
    CSP,
    DASH,
    environment,
    epoch_ms,
    human_bytes,
    human_seconds,
    number,
    segment,
    when,
)
from tests.web.conftest import Console

pytestmark = pytest.mark.anyio


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (None, 0, 1023, 1024, 1536, 5 * 2**30, 3 * 2**50)] == [
        DASH, "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 GiB", "3072.0 TiB"]


def test_human_seconds() -> None:
    assert [human_seconds(s) for s in (None, 0.25, 12, 75, 3 * 3600 + 120, 2 * 86400 + 5 * 3600)] == [
        DASH, "0.2 s", "12 s", "1 min 15 s", "3 h 2 min", "2 d 5 h"]


def test_numbers_times_and_segments() -> None:
    assert [number(n) for n in (None, 1234567, 2.0, 2.25)] == [DASH, "1,234,567", "2", "2.2"]
    assert epoch_ms(0) == DASH and epoch_ms(1_700_000_000_123) == "2023-11-14 22:13:20.123 UTC"
    assert when(None) == "never"
    assert when(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)) == "2026-01-02 03:04:05 UTC"
    assert segment("a b/c:d") == "a%20b%2Fc%3Ad"


def test_every_template_escapes_its_values() -> None:
    assert environment().autoescape is True
    assert environment().from_string("{{ v }}").render(v="<script>x</script>") == "&lt;script&gt;x&lt;/script&gt;"


async def test_pages_carry_the_security_headers(console: Console, app: FastAPI) -> None:
    page = await console.get("/")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP and "script-src 'self'" in CSP
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["cache-control"] == "no-store"


async def messages_of(app: FastAPI, ask: bool) -> list[Message]:
    """What the app sends the server for the login page, the debug extension asked for or not."""
    messages: list[Message] = []

    async def recorder(scope: Scope, receive: Receive, send: Send) -> None:
        if ask:
            scope = {**scope, "extensions": {**scope.get("extensions", {}), "http.response.debug": {}}}

        async def record(message: Message) -> None:
            messages.append(message)
            await send(message)

        await app(scope, receive, record)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=recorder), base_url="http://console") as client:
        assert (await client.get("/login?next=/queues")).status_code == 200
    return messages


async def test_a_page_gives_its_template_and_context_only_to_a_server_that_asks(app: FastAPI) -> None:
    """The "http.response.debug" extension (what Starlette's template responses answer): tests read a
    page's template and context; a real server does not ask and gets the page and nothing more."""
    plain = await messages_of(app, ask=False)
    assert [m["type"] for m in plain] == ["http.response.start", "http.response.body"]
    debug, *rest = await messages_of(app, ask=True)
    assert debug["type"] == "http.response.debug" and debug["info"]["template"] == "login.html"
    assert debug["info"]["context"]["next"] == "/queues" and "request" in debug["info"]["context"]
    assert [m["type"] for m in rest] == ["http.response.start", "http.response.body"]
    assert rest[0]["status"] == plain[0]["status"] == 200
    assert b'name="csrf"' in plain[1]["body"] and b'name="csrf"' in rest[1]["body"]
