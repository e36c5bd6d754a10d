"""The console's audit log (app/web/audit.py): its actions and logins are recorded, and the Audit
page (administrators) lists and filters the log."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from chunkmq.web import actions, alerts, audit, pages
from chunkmq.web import login as login_routes
from chunkmq.web.audit import ACTIONS
from tests.web.conftest import Console, admin_password, console_client, login

pytestmark = pytest.mark.anyio


async def _log(app: FastAPI) -> list[tuple[str, str, str, str, str]]:
    return [(e.source, e.who, e.action, e.resource, e.result) for e in await app.state.audit.entries()]


def test_every_console_action_names_what_it_records() -> None:
    routers = (login_routes.router, pages.router, actions.router, alerts.router, audit.router)
    posts = {r.path for router in routers for r in router.routes if "POST" in getattr(r, "methods", ())}
    assert posts == set(ACTIONS)


async def test_actions_and_logins_are_recorded_without_secrets(app: FastAPI, console: Console) -> None:
    assert "declared" in await console.act("/queues", {"name": "audited-q"})
    await console.act("/queues/audited-q/purge", {"confirm": "yes"})
    flash = await console.act("/queues/no-such-q/delete", {"confirm": "yes"})
    assert "not found" in flash
    await console.act("/access/users", {"name": "viewer", "password": "a secret password"})
    async with console_client(app) as other:
        assert (await login(other, "viewer", "not the password")).status_code == 401
        assert (await login(other, "viewer", "a secret password")).status_code == 303
    log = await _log(app)
    assert log[:6] == [
        ("console", "viewer", "login", "", "ok"),
        ("console", "viewer", "login", "", "unauthorized"),
        ("console", "admin", "user.create", "viewer", "ok"),
        ("console", "admin", "queue.delete", "no-such-q", "queue_not_found"),
        ("console", "admin", "queue.purge", "audited-q", "ok"),
        ("console", "admin", "queue.declare", "audited-q", "ok"),
    ]
    assert log[6] == ("console", "admin", "login", "", "ok")  # the fixture's
    assert "a secret password" not in str(await app.state.audit.entries())
    assert (await app.state.audit.entries())[0].address == "127.0.0.1"


async def test_the_audit_page_lists_and_filters_for_administrators_only(app: FastAPI, console: Console) -> None:
    await console.act("/queues", {"name": "page-q"})
    await console.act("/exchanges", {"name": "page-x", "type": "direct"})
    page = await console.get("/audit")
    assert page.status_code == 200 and page.template == "audit.html"
    assert [e.action for e in page.context["entries"]][:2] == ["exchange.declare", "queue.declare"]
    assert 'href="/audit"' in page.text  # in the navigation
    page = await console.get("/audit", params={"action": "queue", "who": "admin"})
    assert [(e.action, e.resource) for e in page.context["entries"]] == [("queue.declare", "page-q")]
    assert page.context["filters"]["action"] == "queue" and 'value="queue"' in page.text
    assert (await console.get("/audit", params={"since": "2999-01-01T00:00"})).context["entries"] == []
    assert (await console.get("/audit", params={"since": "yesterday"})).status_code == 400
    await console.act("/access/users", {"name": "looker", "password": "look, do not touch"})
    async with console_client(app) as client:
        assert (await login(client, "looker", "look, do not touch")).status_code == 303
        refused = await client.get("/audit")
        assert refused.status_code == 403 and refused.template == "error.html"
        assert 'href="/audit"' not in (await client.get("/")).text


async def test_the_page_pages_through_older_entries(app: FastAPI, console: Console) -> None:
    for i in range(105):
        await app.state.audit.record("api", "bot", "10.0.0.9", "queue.purge", f"q{i}")
    page = await console.get("/audit", params={"who": "bot"})
    assert len(page.context["entries"]) == 100 and page.context["older"]
    older = await console.get(page.context["older"])
    assert [e.resource for e in older.context["entries"]] == [f"q{i}" for i in range(4, -1, -1)]
    assert older.context["older"] is None
    assert admin_password(app) not in page.text
