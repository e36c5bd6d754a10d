"""Logging in and out of the console."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from starlette.responses import Response

from chunkmq.broker import views
from chunkmq.web import audit
from chunkmq.web.forms import read_form
from chunkmq.web.render import redirect, render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    LoginLimiter,
    check_csrf,
    current_session,
    sessions_of,
    set_cookie,
)
from chunkmq.wire import codes

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def safe_next(target: str | None) -> str:
    """Only a path on this console: never another host (an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _login_page(request: Request, next_: str | None, status: int = 200, error: str | None = None) -> Response:
    token = secrets.token_urlsafe(32)
    response = render(
        request, "login.html", None, status=status, login_csrf=token, error=error, next=safe_next(next_),
    )
    set_cookie(request, response, LOGIN_COOKIE, token, max_age=3600)
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    if sessions_of(request).get(request.cookies.get(SESSION_COOKIE)) is not None:
        return redirect("/")
    return _login_page(request, request.query_params.get("next"))


@router.post("/login")
async def login(request: Request) -> Response:
    form = await read_form(request)
    check_csrf(request.cookies.get(LOGIN_COOKIE, secrets.token_urlsafe(8)), form.get("csrf"))
    name, password = form.get("user", ""), form.get("password", "")
    limiter: LoginLimiter = request.app.state.web_limiter
    # The peer's address; a proxy's X-Forwarded-For only when CHUNKMQ_FORWARDED_ALLOW_IPS names it (app/http/server.py)
    client = request.client.host if request.client else "unknown"
    wait = limiter.address_wait(client)
    if wait:
        await audit.record(request, name, audit.LOCKED_OUT)
        return _login_page(request, form.get("next"), 429,
                           f"too many failed logins from this address; try again in {wait} s")
    wait = limiter.user_wait(name)
    if wait:
        await audit.record(request, name, audit.LOCKED_OUT)
        return _login_page(request, form.get("next"), 429,
                           f"too many failed logins for this user; try again in {wait} s")
    user = await views.login(request.app.state.broker, name, password)
    if user is None:
        limiter.failed(client, name)
        await audit.record(request, name, codes.UNAUTHORIZED)
        return _login_page(request, form.get("next"), 401, "wrong user name or password")
    limiter.succeeded(name)
    await audit.record(request, user.name)
    session = sessions_of(request).create(user.name, user.is_admin)
    response = redirect(safe_next(form.get("next")))
    set_cookie(request, response, SESSION_COOKIE, session.id)
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    session = current_session(request)
    form = await read_form(request)
    check_csrf(session.csrf, form.get("csrf"))
    sessions_of(request).drop(session.id)
    await audit.record(request, session.user)
    response = redirect("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
