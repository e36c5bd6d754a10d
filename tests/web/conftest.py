"""In-process console tests: the whole app (lifespan included) over httpx.ASGITransport."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chunkmq.config import Settings
from chunkmq.main import create_app

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    settings = Settings(
        data_dir=tmp_path / "data", chunk_size=1 << 20, index_chunk_entries=1000, console_login_attempts=3,
        console_login_lock_seconds=1, console_login_address_names=3,
        console_page_size=20,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


def admin_password(app: FastAPI) -> str:
    return (app.state.settings.data_dir / "admin-password").read_text().strip()


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "no CSRF field in the page"
    return match.group(1)


async def login(client: httpx.AsyncClient, user: str, password: str) -> httpx.Response:
    page = await client.get("/login")
    return await client.post("/login", data={"user": user, "password": password, "csrf": csrf_of(page.text)})


class PageTransport(httpx.ASGITransport):
    """httpx.ASGITransport that asks the app for each page's template and context (the
    "http.response.debug" extension, which chunkmq.web.render.Page answers as Starlette's template
    responses do) and puts them on the response: `response.template` (its name; None when no template
    rendered, e.g. a redirect) and `response.context` (a dict)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        page: dict[str, Any] = {"template": None, "context": {}}
        app = self.app

        async def recorder(scope: Scope, receive: Receive, send: Send) -> None:
            scope = {**scope, "extensions": {**scope.get("extensions", {}), "http.response.debug": {}}}

            async def record(message: Message) -> None:
                if message["type"] == "http.response.debug":
                    page.update(message["info"])
                else:
                    await send(message)

            await app(scope, receive, record)

        once = httpx.ASGITransport(app=recorder, raise_app_exceptions=self.raise_app_exceptions,
                                   root_path=self.root_path, client=self.client)
        response = await once.handle_async_request(request)
        response.template = page["template"]  # type: ignore[attr-defined]
        response.context = page["context"]  # type: ignore[attr-defined]
        return response


def console_client(app: ASGIApp, base_url: str = "http://console", **kw: Any) -> httpx.AsyncClient:
    """An in-process client of the console whose responses carry `.template` and `.context`."""
    return httpx.AsyncClient(transport=PageTransport(app=app, **kw), base_url=base_url)


@pytest.fixture
async def anon(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(app) as client:
        yield client


class Console:
    """A logged-in admin: `get` pages, `post` forms with the session's CSRF token."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.csrf = ""

    async def get(self, url: str, **kw: object) -> httpx.Response:
        response = await self.client.get(url, **kw)  # type: ignore[arg-type]
        match = CSRF.search(response.text)
        if match:
            self.csrf = match.group(1)
        return response

    async def post(self, url: str, data: dict[str, str] | None = None) -> httpx.Response:
        if not self.csrf:
            await self.get("/")
        return await self.client.post(url, data={"csrf": self.csrf, **(data or {})})

    async def act(self, url: str, data: dict[str, str] | None = None) -> str:
        """POST, follow the redirect, return the flash messages' text (as given to the page, unescaped)."""
        response = await self.post(url, data)
        assert response.status_code == 303, response.text
        page = await self.get(response.headers["location"])
        return " | ".join(text for _kind, text, _code in page.context["flashes"])


@pytest.fixture
async def console(app: FastAPI, anon: httpx.AsyncClient) -> Console:
    response = await login(anon, "admin", admin_password(app))
    assert response.status_code == 303
    return Console(anon)
