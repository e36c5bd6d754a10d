"""`OPTIONS`, `HEAD` and `Allow` (RFC 9110 §9.3.2, §9.3.7, §15.5.6): which methods a path has.

FastAPI registers one route per method, so Starlette's own 405 names the methods of the first route
whose path matched (`Allow: GET` on a path that also has PUT and DELETE). `allowed(routes, path)`
asks every route instead; the error handler puts it on each 405 (app/api/errors.py), and `route`, added
after every other route, answers `OPTIONS` on any path that has one with 204 and `Allow`. Other
requests never reach it: it is last and matches only `OPTIONS`.

`HeadAsGet` serves `HEAD` wherever `GET` is served (FastAPI routes answer only the methods they
name): the app sees a GET, with the same permission checks, and uvicorn, whose own scope still says
HEAD, sends the response's head with its Content-Length and no body.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from chunkmq.broker.errors import InvalidInput, NotFound
from chunkmq.broker.names import check_name

OPTIONS = "OPTIONS"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
HEAD = "chunkmq.head"  # in the scope of a HEAD request served as a GET: a stream sends its head only


def allowed(routes: list[BaseRoute], path: str) -> list[str]:
    """The methods of `path`, with OPTIONS; [] when no route has the path. Each method is tried
    against every route, as the router would (FastAPI nests included routers, so the route list
    alone does not say); a WebSocket route counts as GET, its handshake. Mounts (static files)
    answer any method themselves and are left out."""
    scope: dict[str, Any] = {"type": "http", "path": path, "root_path": "", "headers": [], "query_string": b""}
    candidates = [r for r in routes if not isinstance(r, Mount)]
    methods = {m for m in _METHODS if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in candidates)}
    if "GET" in methods:
        methods.add("HEAD")  # HeadAsGet
    if any(r.matches({**scope, "type": "websocket"})[0] is Match.FULL for r in candidates):
        methods.add("GET")
    return sorted(methods | {OPTIONS}) if methods else []


def allow_header(request: Request) -> str:
    return ", ".join(allowed(request.app.router.routes, request.url.path))


async def options(request: Request) -> Response:
    allow = allow_header(request)
    if not allow:
        raise NotFound(f"no route {request.url.path}")
    return Response(status_code=204, headers={"Allow": allow})


class _OptionsRoute(Route):
    """Matches OPTIONS only: a Route would partly match every other request too, and the router
    answers an unknown path it partly matched with 405 instead of 404."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and scope["method"] == OPTIONS:
            return super().matches(scope)
        return Match.NONE, {}


route = _OptionsRoute("/{path:path}", options, methods=[OPTIONS], include_in_schema=False)


def bad_name(raw_path: str) -> InvalidInput | None:
    """Why a path no route matches is 400 `invalid_name` rather than 404: a queue, exchange or group
    name with `/` (or `%2F`) in it splits into more segments than a route has (`PUT
    /api/v1/queues/<script>x</script>`)."""
    parts = raw_path.split("/")[1:]  # api, v1, queues, {name}, groups, {group}
    if parts[:2] != ["api", "v1"] or len(parts) < 4 or parts[2] not in ("queues", "exchanges"):
        return None
    named = [(parts[3], f"{parts[2][:-1]} name")]
    if parts[2] == "queues" and len(parts) >= 6 and parts[4] == "groups":
        named.append((parts[5], "group name"))
    for value, kind in named:
        try:
            check_name(unquote(value), kind)
        except InvalidInput as exc:
            return exc
    return None


class HeadAsGet:
    """ASGI middleware: a HEAD request goes to the app as a GET (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET", HEAD: True}  # a copy: the server's own scope keeps HEAD
        await self.app(scope, receive, send)
