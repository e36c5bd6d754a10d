"""What every API route needs, in one table (RULES) that the router applies (app/api/router.py).

A route is authorised here and nowhere else: the router adds `authorize` to every route it mounts
and refuses to mount one without a rule (RouteWithoutRule, when the app is built), and the hot
routes (app/api/hot_routes.py) apply the same rules. An endpoint receives the caller as
`who: Principal = Depends(authorize)` (the router's call, not a second one) and uses it only to
filter lists and to check objects it finds by id.

The order of the checks: the token (401 `unauthorized`), the name in the path (400 `invalid_name`),
the permission on that name (403 `forbidden`). The permission is decided from the name alone, before
anything is looked up, so a 403 says nothing about whether the object exists, and its message names
the token, never the object. An object found by an id (a message, a binding) that the token may not
see answers as an id that does not exist (404), for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from chunkmq.api.auth import NOBODY, Principal, TokenAuth, bearer
from chunkmq.api.errors import Refused, refuse
from chunkmq.auth.permissions import Action
from chunkmq.broker.errors import BrokerError, Forbidden
from chunkmq.broker.names import check_name, exchange_from_path

if TYPE_CHECKING:  # loaded with the first FastAPI route (__getattr__ below): the hot routes need neither
    from starlette.requests import HTTPConnection

Who = Literal["anyone", "metrics", "token", "admin", "resource"]


@dataclass(frozen=True, slots=True)
class Need:
    """What a route needs. `who`:
    - anyone: no token (probes, OPTIONS);
    - metrics: no token unless CHUNKMQ_METRICS_REQUIRE_TOKEN=true, then any valid token;
    - token: any valid token: the broker-wide reads (overview, chunk files, alerts), the lists (which
      show only what the token may see) and the routes whose object is found by an id and checked by
      the endpoint;
    - admin: an administrator's token;
    - resource: `permission` on the `kind` named by the path parameter `param`. `see` is any of
      configure, write or read: what makes a list show the object."""

    who: Who
    kind: Literal["", "queue", "exchange"] = ""
    param: str = ""
    permission: Action | Literal["", "see"] = ""

    async def authorize(self, auth: TokenAuth, token: str | None, path_params: dict[str, Any],
                        require_metrics_token: bool = False) -> Principal:
        if self.who == "anyone" or (self.who == "metrics" and not require_metrics_token):
            return NOBODY
        who = await auth.principal(token)
        self.check(who, path_params)
        return who

    def check(self, who: Principal, path_params: dict[str, Any]) -> None:
        """What `authorize` checks once it knows the caller (a route that needs a token)."""
        if self.who == "admin":
            who.check_admin()
        elif self.who == "resource":
            name = path_params[self.param]
            if self.kind == "exchange":
                exchange_from_path(name)  # 400 invalid_name; permissions name the default one amq.default
            else:
                check_name(name, f"{self.kind} name")
            allowed = who.sees(name) if self.permission == "see" else who.permissions.allows(self.permission, name)
            if not allowed:
                verb = "see" if self.permission == "see" else self.permission
                raise Forbidden(f"the token {who.name!r} may not {verb} this {self.kind}")


ANYONE = Need("anyone")
METRICS = Need("metrics")
TOKEN = Need("token")
ADMIN = Need("admin")


def on(kind: Literal["queue", "exchange"], param: str, permission: Action | Literal["see"]) -> Need:
    return Need("resource", kind, param, permission)


# "METHOD path" -> what the route needs. WebSocket routes are "WEBSOCKET path". docs/api.md, Auth,
# says the same in words; tests/api/test_access.py tries every route with five credentials.
RULES: dict[str, Need] = {
    "GET /healthz": ANYONE,
    "GET /readyz": ANYONE,
    "GET /metrics": METRICS,
    "GET /api/v1/overview": TOKEN,
    "GET /api/v1/storage/chunks": TOKEN,
    "GET /api/v1/messages/{message_id}": TOKEN,  # read on the message's queue, checked once it is found
    "GET /api/v1/definitions": ADMIN,
    "POST /api/v1/definitions": ADMIN,
    "GET /api/v1/exchanges": TOKEN,
    "GET /api/v1/exchanges/{name}": on("exchange", "name", "see"),
    "PUT /api/v1/exchanges/{name}": on("exchange", "name", "configure"),
    "DELETE /api/v1/exchanges/{name}": on("exchange", "name", "configure"),
    "POST /api/v1/exchanges/{name}/publish": on("exchange", "name", "write"),
    "WEBSOCKET /api/v1/exchanges/{name}/stream": on("exchange", "name", "write"),
    "GET /api/v1/queues": TOKEN,
    "GET /api/v1/queues/{name}": on("queue", "name", "see"),
    "PUT /api/v1/queues/{name}": on("queue", "name", "configure"),
    "PATCH /api/v1/queues/{name}": on("queue", "name", "configure"),
    "DELETE /api/v1/queues/{name}": on("queue", "name", "configure"),
    "POST /api/v1/queues/{name}/purge": on("queue", "name", "configure"),
    "GET /api/v1/queues/{name}/messages": on("queue", "name", "read"),
    "POST /api/v1/queues/{name}/search": on("queue", "name", "read"),
    "GET /api/v1/queues/{name}/scheduled": on("queue", "name", "read"),
    "POST /api/v1/queues/{name}/publish": on("queue", "name", "write"),
    "GET /api/v1/queues/{queue}/history": on("queue", "queue", "read"),
    "GET /api/v1/queues/{queue}/groups": on("queue", "queue", "see"),
    "GET /api/v1/queues/{queue}/groups/{group}": on("queue", "queue", "see"),
    "PUT /api/v1/queues/{queue}/groups/{group}": on("queue", "queue", "read"),
    "DELETE /api/v1/queues/{queue}/groups/{group}": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/pull": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/ack": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/nack": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/seek": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/pause": on("queue", "queue", "read"),
    "POST /api/v1/queues/{queue}/groups/{group}/resume": on("queue", "queue", "read"),
    "GET /api/v1/queues/{queue}/groups/{group}/history": on("queue", "queue", "read"),
    "GET /api/v1/queues/{queue}/groups/{group}/inflight": on("queue", "queue", "read"),
    "WEBSOCKET /api/v1/queues/{queue}/groups/{group}/stream": on("queue", "queue", "read"),
    "GET /api/v1/queues/{queue}/groups/{group}/events": on("queue", "queue", "read"),
    "GET /api/v1/bindings": TOKEN,
    "POST /api/v1/bindings": TOKEN,  # write on the body's queue, read on its exchange: checked by the endpoint
    "DELETE /api/v1/bindings/{binding_id}": TOKEN,  # the same, on the binding it finds
    # Alerts are broker-wide (docs/api.md, Alerts): any token reads them, admins change them.
    "GET /api/v1/alerts": TOKEN,
    "GET /api/v1/alerts/rules": TOKEN,
    "POST /api/v1/alerts/rules": ADMIN,
    "GET /api/v1/alerts/rules/{rule_id}": TOKEN,
    "PUT /api/v1/alerts/rules/{rule_id}": ADMIN,
    "DELETE /api/v1/alerts/rules/{rule_id}": ADMIN,
    "GET /api/v1/alerts/events": TOKEN,
    "POST /api/v1/alerts/test-email": ADMIN,
    "GET /api/v1/alerts/settings": ADMIN,
    "GET /api/v1/audit": ADMIN,
}


class RouteWithoutRule(RuntimeError):
    """Raised when the app is built with a route RULES does not name: it would be open."""


def rule(method: str, path: str) -> Need:
    need = RULES.get(f"{method} {path}")
    if need is None:
        raise RouteWithoutRule(f"{method} {path} has no entry in RULES (app/api/access.py): say what it needs")
    return need


#: HTTP routes that take the token as `?token=` too, as every WebSocket route does: an EventSource
#: cannot set headers (app/api/events.py)
QUERY_TOKEN_PATHS = frozenset({"/api/v1/queues/{queue}/groups/{group}/events"})


async def authorize(conn: HTTPConnection) -> Principal:
    """The caller of a routed request, authorised by its route's rule (once per request: FastAPI
    caches it for the endpoint's own `Depends(authorize)`)."""
    route = conn.scope["route"]
    method = "WEBSOCKET" if conn.scope["type"] == "websocket" else conn.scope["method"]
    state = conn.app.state
    try:
        token = bearer(conn.headers.get("authorization"))
        if conn.scope["type"] == "websocket" or route.path in QUERY_TOKEN_PATHS:
            token = token or conn.query_params.get("token")
        return await rule(method, route.path).authorize(
            state.auth, token, conn.path_params, state.settings.metrics_require_token)
    except BrokerError as exc:
        if conn.scope["type"] != "websocket":
            raise
        from starlette.websockets import WebSocket

        assert isinstance(conn, WebSocket)
        await conn.accept()
        await refuse(conn, exc, text=conn.query_params.get("format") == "binary")
        raise Refused from None


def __getattr__(name: str) -> Any:
    """AUTHORIZE, `Depends(authorize)`: what a FastAPI route takes its caller from. Made when the
    first route asks, so that the hot routes, which use `Authorized`, need no FastAPI nor Starlette's
    requests (app/start.py)."""
    if name != "AUTHORIZE":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fastapi import Depends
    from starlette.requests import HTTPConnection

    globals()["HTTPConnection"] = HTTPConnection  # authorize's annotation, which FastAPI reads from this module
    globals()["AUTHORIZE"] = value = Depends(authorize)
    return value

