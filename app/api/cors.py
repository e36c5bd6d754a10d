"""Cross-origin requests to `/api/v1` from web apps on the origins of CHUNKMQ_CORS_ORIGINS.

Starlette's CORSMiddleware answers a preflight from a listed origin (200, `Access-Control-Allow-*`)
and adds `Access-Control-Allow-Origin` and `Vary: Origin` to every answer to one, errors included.
It is scoped to `/api/v1`: the console's pages are same-origin only and keep their own checks
(CSRF, Origin). No credentials: the API takes bearer tokens, never cookies.

A preflight from an origin not listed goes on to the app as any OPTIONS (204 `Allow`, no
`Access-Control-Allow-*`), so the browser refuses the request it asked for, and nothing else
changes: with no origin listed (the default) this middleware is not installed at all.

The hot routes are answered ahead of any middleware (app/api/hot_routes.py): a request with an
`Origin` header takes the stack while origins are listed (`HotRoutes.cross_origin`), so it is
answered here like any other.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
#: Request headers a page may send (besides the CORS-safelisted ones): the token, JSON and batch
#: bodies, an idempotency key, and the resume point an EventSource sends when it reconnects.
HEADERS = ("authorization", "content-type", "idempotency-key", "last-event-id")
#: Response headers a page may read (besides the CORS-safelisted ones).
EXPOSE = ("link", "retry-after", "x-next-offset", "allow", "www-authenticate")
MAX_AGE_SECONDS = 600


def _origin(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"origin":
            return value
    return None


def _is_api(path: str) -> bool:
    return path.startswith("/api/v1/") or path == "/api/v1"


class ApiCors:
    """ASGI middleware: CORSMiddleware for `/api/v1`, the rest of the app as it is."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed
        self.cors = CORSMiddleware(app, allow_origins=sorted(allowed), allow_methods=METHODS,
                                   allow_headers=HEADERS, expose_headers=EXPOSE, max_age=MAX_AGE_SECONDS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_api(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            origin = _origin(scope)
            if origin is None or origin.decode("latin-1") not in self.allowed:
                await self.app(scope, receive, send)  # no CORS headers: the browser refuses
                return
        await self.cors(scope, receive, send)
