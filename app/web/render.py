"""Rendering console pages: one Jinja2 environment (autoescape always on), display filters, and the
security headers every console response carries."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from chunkmq import __version__
from chunkmq.broker import views
from chunkmq.broker.queue import QueueSettings
from chunkmq.web.session import Session

if TYPE_CHECKING:
    from jinja2 import Environment

DASH = "\u2013"  # an en dash for "no value"
TEMPLATES = Path(__file__).parent / "templates"

# No inline script or style anywhere: every script is a file under /static. Charts set sizes through
# the CSSOM (element.style), which style-src does not govern.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return DASH
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_seconds(s: float | None) -> str:
    if s is None:
        return DASH
    s = float(s)
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{s // 60:.0f} min {s % 60:.0f} s"
    if s < 86400:
        return f"{s // 3600:.0f} h {s % 3600 // 60:.0f} min"
    return f"{s // 86400:.0f} d {s % 86400 // 3600:.0f} h"


def number(n: int | float | None) -> str:
    if n is None:
        return DASH
    return f"{n:,.1f}" if isinstance(n, float) and not n.is_integer() else f"{int(n):,}"


def epoch_ms(ms: int | None) -> str:
    if not ms:
        return DASH
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "never"


def segment(name: str) -> str:
    """A name as one URL path segment (names may hold spaces and colons)."""
    return quote(name, safe="")


# The navigation: (path, label). Other parts of the console append their pages here (Alerts,
# Settings); base.html renders the list in order.
NAV: list[tuple[str, str]] = [
    ("/", "Overview"),
    ("/exchanges", "Exchanges"),
    ("/queues", "Queues"),
    ("/groups", "Consumer groups"),
    ("/storage", "Storage"),
    ("/access", "Access"),
    ("/definitions", "Definitions"),
]
# Pages only administrators may open (they answer 403 to others): the navigation hides them from others.
ADMIN_PAGES = {"/definitions", "/settings"}


@functools.cache
def environment() -> Environment:
    """The console's one Jinja2 environment, made by the first page rendered: Jinja2 is not imported
    before then, so a server's start does not wait for it."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name: all output is escaped unless marked safe
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(bytes=human_bytes, seconds=human_seconds, num=number, ms=epoch_ms, when=when, seg=segment)
    env.globals.update(version=__version__, blank_settings=QueueSettings().as_dict(), nav=NAV,
                       admin_pages=ADMIN_PAGES)
    return env


def since_start(request: Request) -> str:
    """How long ago the broker started: its counters (messages in, delivered...) start at zero then."""
    broker = getattr(request.app.state, "broker", None)
    return f"since start, {human_seconds(views.uptime_seconds(broker))} ago" if broker is not None else ""


class Page(HTMLResponse):
    """A rendered page that keeps its template's name and context, and hands both to a server that asks
    for them (the "http.response.debug" extension, as Starlette's own template responses do): tests
    check what a page shows without parsing its HTML. Real servers do not ask; they get the HTML only."""

    def __init__(self, html: str, template: str, context: dict[str, Any], status_code: int) -> None:
        super().__init__(html, status_code=status_code, headers=SECURITY_HEADERS)
        self.template = template
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if "http.response.debug" in scope.get("extensions", {}):
            await send({"type": "http.response.debug", "info": {"template": self.template, "context": self.context}})
        await super().__call__(scope, receive, send)


def render(
    request: Request, template: str, session: Session | None = None, status: int = 200, **context: Any
) -> Page:
    context = dict(
        request=request,
        path=request.url.path,
        live_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        session=session,
        csrf=session.csrf if session else "",
        # A poll (htmx) must not eat the flash meant for the page the browser is about to load.
        flashes=session.take_flashes() if session and request.headers.get("hx-request") != "true" else [],
        refresh=request.app.state.settings.console_refresh_seconds,
        since_start=since_start(request),
        **context,
    )
    return Page(environment().get_template(template).render(context), template, context, status)


def redirect(url: str) -> Response:
    """After a POST: 303 so the browser GETs the target (a reload does not repeat the action)."""
    return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)
