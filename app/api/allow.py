"""`OPTIONS` and `Allow` (RFC 9110 §9.3.7, §15.5.6): which methods a path has, across every route.

FastAPI registers one route per method, so Starlette's own 405 names the methods of the first route
whose path matched (`Allow: GET` on a path that also has PUT and DELETE). `allowed(app, path)` asks
every route instead; the error handler puts it on each 405 (app/api/errors.py), and `route`, added
after every other route, answers `OPTIONS` on any path that has one with 204 and `Allow`. Other
requests never reach it: it is last and matches only `OPTIONS`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from app.broker.errors import NotFound

OPTIONS = "OPTIONS"


def allowed(routes: list[BaseRoute], path: str) -> list[str]:
    """The methods of `path` (a WebSocket route counts as GET, its handshake), with OPTIONS; [] when
    no route has the path."""
    methods: set[str] = set()
    for r in routes:
        if isinstance(r, Route) and r.methods and OPTIONS not in r.methods and r.path_regex.match(path):
            methods |= r.methods
        elif isinstance(r, WebSocketRoute) and r.path_regex.match(path):
            methods.add("GET")
    return sorted(methods | {OPTIONS}) if methods else []


def allow_header(request: Request) -> str:
    return ", ".join(allowed(request.app.router.routes, request.url.path))


async def options(request: Request) -> Response:
    allow = allow_header(request)
    if not allow:
        raise NotFound(f"no route {request.url.path}")
    return Response(status_code=204, headers={"Allow": allow})


route = Route("/{path:path}", options, methods=[OPTIONS], include_in_schema=False)
