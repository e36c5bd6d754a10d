"""Browser protections for a server without tokens (CHUNKMQ_AUTH=off, bound to 127.0.0.1).

Without tokens, the only thing between a web page on any site and the broker is the browser. Two
checks close the doors a browser leaves open:

- Host: a DNS-rebinding page reaches 127.0.0.1 under its own name (`Host: attacker.example`), so a
  request whose Host is not the bound address (or localhost) is refused with 400 `invalid_host`.
  Every route, the console's too.
- Origin and content type on `/api/v1` state changes (POST, PUT, PATCH, DELETE, and WebSocket
  handshakes): a foreign `Origin` (one not in CHUNKMQ_CORS_ORIGINS) is refused with 403
  `cross_origin`, and a body that is not `application/json` or a binary batch
  (`application/vnd.chunkmq.batch`) with 415: a page cannot send either without a CORS preflight.
  The console's forms post to its own pages, on the same origin, with CSRF tokens, outside
  `/api/v1`.

With tokens on, neither applies: a page cannot read or guess a bearer token.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from chunkmq.api.body import media_type
from chunkmq.api.errors import send_error
from chunkmq.config import Settings
from chunkmq.wire import codes
from chunkmq.wire.batch import MEDIA_TYPE as BATCH_MEDIA_TYPE

#: One check of every request: (kind, scope, headers) -> (status, code, message) of its refusal, or None
Check = Callable[[str, Scope], "tuple[int, str, str] | None"]

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BODY_TYPES = frozenset({"application/json", BATCH_MEDIA_TYPE})  # neither is sent by a page without a preflight
_BODY_TYPES_RAW = frozenset(t.encode() for t in _BODY_TYPES)  # the usual header values, taken without parsing


class LocalChecks:
    """The checks above, for a server bound to `host`."""

    def __init__(self, host: str, origins: frozenset[str] = frozenset()) -> None:
        self.hosts = {host, "127.0.0.1", "localhost", "[::1]"}
        self.origins = origins  # CHUNKMQ_CORS_ORIGINS: pages the operator lets in (app/api/cors.py)
        self.seen: set[str] = set()  # Host values that passed

    def _host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        if value in self.seen:
            return True
        name = value.rsplit(":", 1)[0] if not value.endswith("]") else value
        if name.lower() not in self.hosts:
            return False
        if len(self.seen) < 100:  # the few Host values this server's clients send
            self.seen.add(value)
        return True

    def check(self, kind: str, scope: Scope) -> tuple[int, str, str] | None:
        """(status, code, message) of the refusal, or None when the request may pass."""
        raw_host = raw_origin = raw_type = None
        for key, value in scope["headers"]:  # one pass, the first value of each (as body.header)
            if key == b"host":
                raw_host = value if raw_host is None else raw_host
            elif key == b"origin":
                raw_origin = value if raw_origin is None else raw_origin
            elif key == b"content-type":
                raw_type = value if raw_type is None else raw_type
        host = raw_host.decode("latin-1") if raw_host is not None else None
        if not self._host_ok(host):
            return 400, codes.INVALID_HOST, f"this server answers to {sorted(self.hosts)}, not Host {host!r}"
        path = scope["path"]
        if not path.startswith("/api/v1/") and path != "/api/v1":
            return None
        if kind == "http" and scope["method"] not in _CHANGES:
            return None
        if raw_origin is not None:
            origin = raw_origin.decode("latin-1")
            if origin in self.origins:
                pass
            elif origin == "null" or urlsplit(origin).netloc.lower() != (host or "").lower():
                return 403, codes.CROSS_ORIGIN, f"requests from another site ({origin}) may not change the broker"
        if kind == "http" and raw_type is not None and raw_type not in _BODY_TYPES_RAW:
            content_type = raw_type.decode("latin-1")
            if media_type(content_type) not in _BODY_TYPES:
                return 415, codes.UNSUPPORTED_MEDIA_TYPE, f"bodies must be application/json, not {content_type}"
        return None


def every_request(settings: Settings) -> list[Check]:
    """What every HTTP request and WebSocket handshake must pass before any route, in order: the one
    list that both the middleware stack (`Guard`) and the hot routes (app/api/hot_routes.py) apply.
    A check that must cover every request is added here, not as a middleware of its own."""
    return [LocalChecks(settings.host, settings.cors_allowed).check] if settings.auth == "off" else []


def first_problem(checks: list[Check], kind: str, scope: Scope) -> tuple[int, str, str] | None:
    for check in checks:
        problem = check(kind, scope)
        if problem is not None:
            return problem
    return None


class Guard:
    """ASGI middleware: the checks of `every_request` on every HTTP request and WebSocket handshake."""

    def __init__(self, app: ASGIApp, checks: list[Check]) -> None:
        self.app = app
        self.checks = checks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = first_problem(self.checks, kind, scope)
        if problem is None:
            await self.app(scope, receive, send)
        elif kind == "websocket":  # refuse the handshake: a 403 without a body
            await send({"type": "websocket.close", "code": 4000 + problem[0], "reason": problem[1]})
        else:
            await send_error(send, *problem)
