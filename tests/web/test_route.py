"""The console's errors (app/web/route.py, actions.outcome) go through the API's one error map: the
same bad input sent to the API, the console and the CLI gets the same code and status, and no
presenter shows a driver's text."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from chunkmq.cli import main as cli
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.wire import codes
from tests.web.conftest import Console, admin_password, login

pytestmark = pytest.mark.anyio

CODE = re.compile(r'data-code="([a-z_]+)"')


@pytest.fixture
async def budget_app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    """A broker whose disk budget is already spent: every publish is refused with 507."""
    settings = Settings(data_dir=tmp_path / "data", chunk_size=1 << 20, index_chunk_entries=1000, disk_budget_bytes=1)
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@contextlib.asynccontextmanager
async def _clients(application: FastAPI) -> AsyncIterator[tuple[httpx.AsyncClient, Console]]:
    """An admin on the API (bearer token) and on the console (session, CSRF), in process."""
    transport = httpx.ASGITransport(app=application)
    token = (application.state.settings.data_dir / "admin-token").read_text().strip()
    async with (httpx.AsyncClient(transport=transport, base_url="http://console/api/v1",
                                  headers={"authorization": f"Bearer {token}"}) as api,
                httpx.AsyncClient(transport=transport, base_url="http://console") as browser):
        assert (await login(browser, "admin", admin_password(application))).status_code == 303
        yield api, Console(browser)


def _api_answer(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def _page_answer(response: httpx.Response) -> tuple[int, str]:
    """An error page: its status and the code it shows."""
    [code] = CODE.findall(response.text)
    assert f"<code>{code}</code>" in response.text
    return response.status_code, code


async def _flash_code(console: Console, url: str, data: dict[str, str]) -> str:
    """An action's error: flashed on the page it redirects to, with the API's code."""
    response = await console.post(url, data)
    assert response.status_code == 303, response.text
    page = await console.get(response.headers["location"])
    found = set(CODE.findall(page.text))  # a redirect to the missing queue's page shows its error too
    assert len(found) == 1, (url, found)
    return found.pop()


async def test_pages_answer_the_api_codes_and_statuses(app: FastAPI) -> None:
    async with _clients(app) as (api, console):
        await api.put("/exchanges/ex", json={"type": "direct"})
        for api_path, page in (("/queues/nope", "/queues/nope"), ("/exchanges/nope", "/exchanges/nope"),
                               ("/alerts/rules/x", "/alerts/rules/x/enabled")):
            expected = _api_answer(await api.get(api_path))
            if page.endswith("/enabled"):  # a path parameter that is not a number: the same 400
                got = _page_answer(await console.post(page, {}))
            else:
                got = _page_answer(await console.get(page))
            assert got == expected, (api_path, page)
        assert _api_answer(await api.get("/queues/nope")) == (404, codes.QUEUE_NOT_FOUND)
        assert _api_answer(await api.get("/alerts/rules/x")) == (400, codes.INVALID_REQUEST)


async def test_actions_flash_the_api_codes(app: FastAPI) -> None:
    async with _clients(app) as (api, console):
        assert (await api.put("/exchanges/ex", json={"type": "direct"})).status_code == 201
        cases = [  # (API request, console action and form)
            (("PUT", "/exchanges/ex", {"type": "fanout"}), ("/exchanges", {"name": "ex", "type": "fanout"})),
            (("PUT", "/queues/amq.q", {}), ("/queues", {"name": "amq.q"})),
            (("DELETE", "/queues/nope", None), ("/queues/nope/delete", {"confirm": "yes"})),
            (("POST", "/queues/nope/purge", None), ("/queues/nope/purge", {"confirm": "yes"})),
            (("DELETE", "/alerts/rules/999", None), ("/alerts/rules/999/delete", {"confirm": "yes"})),
            (("POST", "/alerts/rules", {"kind": "lag_messages", "queue": "q", "threshold": -1}),
             ("/alerts/rules", {"kind": "lag_messages", "queue": "q", "threshold": "-1"})),
        ]
        seen = set()
        for (method, path, body), (action, form) in cases:
            status, code = _api_answer(await api.request(method, path, json=body))
            assert 400 <= status < 500, (path, status, code)
            assert await _flash_code(console, action, form) == code, (path, action)
            seen.add(code)
        assert {codes.PRECONDITION_FAILED, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND, codes.RULE_NOT_FOUND} <= seen


async def test_a_full_disk_gets_the_api_code_on_the_console(budget_app: FastAPI) -> None:
    async with _clients(budget_app) as (api, console):
        assert (await api.put("/queues/q", json={})).status_code == 201
        expected = _api_answer(await api.post("/queues/q/publish", json={"messages": [{"body": "x"}]}))
        assert expected == (507, codes.STORAGE_FULL)
        assert await _flash_code(console, "/queues/q/publish", {"body": "x"}) == codes.STORAGE_FULL


async def test_a_database_failure_shows_no_driver_text(app: FastAPI, caplog: pytest.LogCaptureFixture) -> None:
    """The metadata database loses a table: the API and the console both answer 503 unavailable with
    the map's sentence, never SQLite's words (which go to the log)."""
    async with _clients(app) as (api, console):
        await console.get("/")  # the session's CSRF token, before the table goes
        with sqlite3.connect(app.state.settings.data_dir / "meta.db") as db:
            db.execute("DROP TABLE alert_rules")
        expected = _api_answer(await api.get("/alerts/rules"))
        assert expected == (503, codes.UNAVAILABLE)
        for response in (await api.get("/alerts/rules"), await console.get("/alerts"),
                         await console.post("/alerts/rules", {"kind": "lag_messages", "queue": "q", "threshold": "5"})):
            assert "no such table" not in response.text and "alert_rules" not in response.text
        assert _page_answer(await console.get("/alerts")) == expected
        assert _page_answer(await console.post(
            "/alerts/rules", {"kind": "lag_messages", "queue": "q", "threshold": "5"})) == expected
        assert "no such table" in caplog.text  # the server log keeps the cause


async def test_the_cli_answers_the_same_codes(app: FastAPI, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(app.state.settings.data_dir)
    async with _clients(app) as (api, _console):
        api_code = _api_answer(await api.delete("/alerts/rules/999"))[1]
        assert cli(["alerts", "delete", "999", "--data-dir", data_dir]) == 1
        assert f"({api_code})" in capsys.readouterr().err
        api_code = _api_answer(await api.post("/alerts/rules", json={"kind": "lag_messages", "queue": "q",
                                                                     "threshold": -1}))[1]
        assert cli(["alerts", "add", "--kind", "lag_messages", "--queue", "q", "--threshold", "-1",
                    "--data-dir", data_dir]) == 2
        assert f"({api_code})" in capsys.readouterr().err
        assert cli(["token", "delete", "999", "--data-dir", data_dir]) == 1
        assert f"({codes.TOKEN_NOT_FOUND})" in capsys.readouterr().err
