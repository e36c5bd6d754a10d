"""Logging in and out: sessions, cookie flags, CSRF on the login form, failed-login limits."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from tests.web.conftest import Console, admin_password, console_client, csrf_of, login

pytestmark = pytest.mark.anyio

ALICE = "alice's long password"


async def _user(app: FastAPI, name: str) -> None:
    await asyncio.to_thread(app.state.meta.create_user, name, ALICE, False)


PAGES = ["/", "/exchanges", "/exchanges/amq.default", "/queues", "/queues/q", "/groups", "/storage", "/access",
         "/definitions"]


@pytest.mark.parametrize("url", PAGES)
async def test_every_page_needs_a_login(anon: httpx.AsyncClient, url: str) -> None:
    response = await anon.get(url)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=")


async def test_a_poll_after_logout_redirects_the_browser(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 401 and response.headers["hx-redirect"] == "/login"


async def test_login_sets_a_strict_httponly_cookie_and_returns_to_next(app: FastAPI, anon: httpx.AsyncClient) -> None:
    page = await anon.get("/login?next=/queues")
    response = await anon.post("/login", data={
        "user": "admin", "password": admin_password(app), "csrf": csrf_of(page.text), "next": "/queues",
    })
    assert response.status_code == 303 and response.headers["location"] == "/queues"
    cookie = response.headers["set-cookie"].lower()
    assert "chunkmq_session=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert "secure" not in cookie  # plain http here; https requests get Secure
    assert (await anon.get("/queues")).status_code == 200


async def test_secure_cookie_over_https(app: FastAPI) -> None:
    async with console_client(app, base_url="https://console") as client:
        response = await login(client, "admin", admin_password(app))
        assert response.status_code == 303
        assert "secure" in response.headers["set-cookie"].lower()


async def test_next_never_leaves_the_console(app: FastAPI, anon: httpx.AsyncClient) -> None:
    page = await anon.get("/login")
    response = await anon.post("/login", data={
        "user": "admin", "password": admin_password(app), "csrf": csrf_of(page.text), "next": "//evil.example/",
    })
    assert response.headers["location"] == "/"


async def test_login_form_needs_its_csrf_cookie(app: FastAPI, anon: httpx.AsyncClient) -> None:
    response = await anon.post("/login", data={"user": "admin", "password": admin_password(app), "csrf": "forged"})
    assert response.status_code == 403
    assert "chunkmq_session" not in response.headers.get("set-cookie", "")


async def test_wrong_passwords_delay_their_user_and_no_one_else(app: FastAPI, anon: httpx.AsyncClient) -> None:
    await _user(app, "alice")
    for _ in range(3):  # console_login_attempts=3, console_login_lock_seconds=1 in the fixture
        response = await login(anon, "admin", "wrong")
        assert response.status_code == 401
        assert (response.template, response.context["error"]) == ("login.html", "wrong user name or password")
    blocked = await login(anon, "admin", admin_password(app))  # even the right password now waits
    assert blocked.status_code == 429 and blocked.template == "login.html"
    assert "too many failed logins for this user" in blocked.context["error"]
    # alice, behind the same address, logs in at once
    assert (await login(anon, "alice", ALICE)).status_code == 303


async def test_a_flood_for_one_user_from_one_address_keeps_that_address_open(
        app: FastAPI, anon: httpx.AsyncClient) -> None:
    await _user(app, "alice")
    for _ in range(3):
        assert (await login(anon, "admin", "wrong")).status_code == 401
    async with console_client(app, client=("5.6.7.8", 4000)) as elsewhere:
        locked = await login(elsewhere, "admin", admin_password(app))
        assert locked.status_code == 429 and "too many failed logins for this user" in locked.context["error"]
        for _ in range(5):  # the flood goes on: refused for the user, it does not lengthen the wait
            assert (await login(anon, "admin", "wrong")).status_code == 429
        assert (await login(anon, "alice", ALICE)).status_code == 303
        await asyncio.sleep(1.1)
        assert (await login(elsewhere, "admin", admin_password(app))).status_code == 303


async def test_guesses_across_names_refuse_the_address(app: FastAPI, anon: httpx.AsyncClient) -> None:
    for name in ("u1", "u2", "u3"):  # console_login_address_names=3 in the fixture
        assert (await login(anon, name, "wrong")).status_code == 401
    refused = await login(anon, "admin", admin_password(app))
    assert refused.status_code == 429 and "too many failed logins from this address" in refused.context["error"]
    async with console_client(app, client=("5.6.7.8", 4000)) as elsewhere:
        assert (await login(elsewhere, "admin", admin_password(app))).status_code == 303


async def test_logout_ends_the_session(console: Console) -> None:
    await console.get("/")
    response = await console.post("/logout")
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert (await console.client.get("/")).status_code == 303


async def test_logout_needs_csrf(console: Console) -> None:
    response = await console.client.post("/logout", data={"csrf": "nope"})
    assert response.status_code == 403
    assert (await console.client.get("/")).status_code == 200


async def test_read_only_user_cannot_act(app: FastAPI, console: Console) -> None:
    flash = await console.act("/access/users", {"name": "viewer", "password": "look only, please"})
    assert "console user 'viewer' created" in flash
    async with console_client(app) as client:
        assert (await login(client, "viewer", "look only, please")).status_code == 303
        viewer = Console(client)
        page = await viewer.get("/queues")
        assert page.status_code == 200 and page.template == "queues.html"
        assert (page.context["session"].user, page.context["session"].is_admin) == ("viewer", False)
        assert "viewer (read-only)" in page.text  # what the header tells them
        refused = await viewer.post("/queues", {"name": "nope"})
        assert refused.status_code == 403 and refused.template == "error.html"
        assert "not an administrator" in refused.context["message"]
        assert "nope" not in app.state.broker.queues
        change = {"current": "look only, please", "new": "n3w" * 4, "repeat": "n3w" * 4}
        flash = await viewer.act("/access/password", change)
        assert "password changed" in flash


async def test_a_poll_does_not_take_the_flash_of_the_next_page(app: FastAPI, console: Console) -> None:
    await console.get("/")
    response = await console.post("/exchanges", {"name": "fx", "type": "direct"})
    assert response.status_code == 303
    poll = await console.client.get("/exchanges", headers={"HX-Request": "true"})
    assert poll.template == "exchanges_live.html" and poll.context["flashes"] == []
    page = await console.get("/exchanges")
    assert page.context["flashes"] == [("ok", "exchange 'fx' declared", "")]
