"""In-process console tests: the whole app (lifespan included) over httpx.ASGITransport."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

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
        console_login_lock_seconds=1,
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


@pytest.fixture
async def anon(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
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
        """POST, follow the redirect, return the flash messages' text."""
        response = await self.post(url, data)
        assert response.status_code == 303, response.text
        page = await self.get(response.headers["location"])
        return " | ".join(re.findall(r'<div class="flash (?:ok|error)"[^>]*>(.*?)</div>', page.text, re.S))


@pytest.fixture
async def console(app: FastAPI, anon: httpx.AsyncClient) -> Console:
    response = await login(anon, "admin", admin_password(app))
    assert response.status_code == 303
    return Console(anon)
