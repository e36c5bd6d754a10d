"""The admin console: server-rendered pages (Jinja2, app/web/templates/) and assets (static/).

Console pages live outside /api/v1 and use a session cookie with CSRF tokens (session.py), not
bearer tokens. `install(app)` adds the routes, the static files and the login redirects.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, Response

from chunkmq.config import Settings
from chunkmq.resources import STATIC
from chunkmq.web import actions, alerts, audit, group, login, pages, search
from chunkmq.web.render import redirect
from chunkmq.web.route import error_page
from chunkmq.web.session import UNLOCKS_FILE, CsrfFailed, LoginLimiter, LoginRequired, SessionStore
from chunkmq.web.snapshots import Snapshots
from chunkmq.wire import codes


def install(app: FastAPI, settings: Settings) -> None:
    app.state.web_sessions = SessionStore(settings.console_session_idle_seconds)
    app.state.web_limiter = LoginLimiter(settings.console_login_attempts, settings.console_login_window_seconds,
                                         settings.console_login_lock_seconds, settings.data_dir / UNLOCKS_FILE,
                                         address_names=settings.console_login_address_names,
                                         max_lock_seconds=settings.console_login_max_lock_seconds)
    # At most one build of the shared views per half refresh period, whatever the number of tabs.
    app.state.web_snapshots = Snapshots(min(1.0, settings.console_refresh_seconds / 2))
    routers = (login.router, pages.router, actions.router, alerts.router, audit.router, search.router, group.router)
    for router in routers:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        """Browsers and tools ask for it whatever the page links: the console's icon, an SVG."""
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml",
                            headers={"Cache-Control": "max-age=86400"})

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, _: LoginRequired) -> Response:
        if request.headers.get("hx-request") == "true":  # a poll after the session ended
            return Response(status_code=401, headers={"HX-Redirect": "/login"})
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return redirect(f"/login?next={quote(target, safe='')}" if request.method == "GET" else "/login")

    @app.exception_handler(CsrfFailed)
    async def csrf_failed(request: Request, _: CsrfFailed) -> Response:
        return error_page(
            request, 403, "the form has expired or did not come from this console: reload the page and try again",
            codes.FORBIDDEN,
        )
