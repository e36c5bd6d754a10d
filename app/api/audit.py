"""The audit log over HTTP: `AuditTrail`, the middleware that records every state-changing API call
(the routes named in ACTIONS), and `GET /api/v1/audit` (admins) that reads the log back.

One mechanism for the whole API: the middleware sees every routed request, so a route is audited by
naming it in ACTIONS, not by a call in its endpoint. It records after the route answered and before
the answer leaves (the response is held: the routes audited answer a few hundred bytes), with the
result taken from the status and, for an error, the body's code. The hot routes (publish and pull)
are served ahead of the middleware stack and are not audited: they change no definition.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chunkmq.api import schemas
from chunkmq.api.auth import TokenAuth, bearer
from chunkmq.api.deps import json
from chunkmq.broker.audit import OK, AuditLog
from chunkmq.meta.audit import AuditRow

router = APIRouter(prefix="/api/v1", tags=["operations"])

# "METHOD path" of a route -> the action it records. tests/api/test_audit.py fails for a route that
# changes state and is neither here nor in NOT_AUDITED.
ACTIONS: dict[str, str] = {
    "PUT /api/v1/exchanges/{name}": "exchange.declare",
    "DELETE /api/v1/exchanges/{name}": "exchange.delete",
    "PUT /api/v1/queues/{name}": "queue.declare",
    "PATCH /api/v1/queues/{name}": "queue.update",
    "DELETE /api/v1/queues/{name}": "queue.delete",
    "POST /api/v1/queues/{name}/purge": "queue.purge",
    "PUT /api/v1/queues/{queue}/groups/{group}": "group.declare",
    "DELETE /api/v1/queues/{queue}/groups/{group}": "group.delete",
    "POST /api/v1/queues/{queue}/groups/{group}/seek": "group.seek",
    "POST /api/v1/queues/{queue}/groups/{group}/pause": "group.pause",
    "POST /api/v1/queues/{queue}/groups/{group}/resume": "group.resume",
    "POST /api/v1/bindings": "binding.create",
    "DELETE /api/v1/bindings/{binding_id}": "binding.delete",
    "POST /api/v1/definitions": "definitions.import",
    "POST /api/v1/alerts/rules": "alert_rule.create",
    "PUT /api/v1/alerts/rules/{rule_id}": "alert_rule.put",
    "DELETE /api/v1/alerts/rules/{rule_id}": "alert_rule.delete",
    "POST /api/v1/alerts/test-email": "alerts.test_email",
}

# Routes with a changing method that are the data path (messages in and out) or only read (a search
# is a POST for its body), not administration.
NOT_AUDITED = frozenset({
    "POST /api/v1/queues/{name}/search",
    "POST /api/v1/exchanges/{name}/publish",
    "POST /api/v1/queues/{name}/publish",
    "POST /api/v1/queues/{queue}/groups/{group}/pull",
    "POST /api/v1/queues/{queue}/groups/{group}/ack",
    "POST /api/v1/queues/{queue}/groups/{group}/nack",
})

_HELD_BYTES = 64 * 1024  # an answer larger than this is passed on as it comes, recorded by its status


def client_address(scope: Scope) -> str:
    """The peer's address (a proxy's X-Forwarded-For when CHUNKMQ_FORWARDED_ALLOW_IPS names it, as
    uvicorn applies it), or "" when the server does not know it."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _result(status: int, body: bytes) -> str:
    if status < 400:
        return OK
    try:
        code = orjson.loads(body)["error"]["code"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"http_{status}"
    return str(code)


def _resource(scope: Scope, status: int, body: bytes) -> str:
    """The path's names; for a creation named by its answer (a binding, a rule), the answer's id."""
    params = scope.get("path_params") or {}
    if params:
        return "/".join(str(v) for v in params.values())
    if status < 300 and body:
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ""
        if isinstance(answer, dict) and isinstance(answer.get("id"), int | str):
            return str(answer["id"])
    return ""


def _who(auth: TokenAuth | None, scope: Scope) -> str:
    """The caller's token name, when it was valid (the route's rule looked it up: the cache answers)."""
    if auth is None:
        return ""
    header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
    principal = auth.known(bearer(header.decode("latin-1")) if header is not None else None)
    return principal.name if principal is not None else ""


class AuditTrail:
    """ASGI middleware: the ACTIONS routes are recorded in the audit log with their result."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS") \
                or not scope["path"].startswith("/api/v1/"):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        size = 0
        passing = False  # not audited, or recorded already: messages go straight on

        def action() -> str | None:
            route = scope.get("route")  # set by the router once it matched
            return ACTIONS.get(f"{scope['method']} {getattr(route, 'path', '')}")

        async def record(status: int, body: bytes) -> None:
            state = scope["app"].state
            audit: AuditLog | None = getattr(state, "audit", None)
            what = action()
            if audit is not None and what is not None:
                await audit.record("api", _who(getattr(state, "auth", None), scope), client_address(scope),
                                   what, _resource(scope, status, body), _result(status, body))

        async def audited_send(message: Message) -> None:
            nonlocal size, passing
            if message["type"] == "http.response.start":
                passing = action() is None
            if passing or message["type"] not in ("http.response.start", "http.response.body"):
                await send(message)  # an extension's message (a test's page debug info) is not held
                return
            held.append(message)
            if message["type"] != "http.response.body":
                return
            size += len(message.get("body", b""))
            done = not message.get("more_body", False)
            if done or size > _HELD_BYTES:
                await record(held[0]["status"], b"".join(m.get("body", b"") for m in held[1:]) if done else b"")
                passing = True
                for m in held:
                    await send(m)
                held.clear()

        try:
            await self.app(scope, receive, audited_send)
        except Exception:
            if not passing:  # a failure of the server itself, answered 500 further out
                await record(500, b'{"error": {"code": "internal_error"}}')
            raise


def entry_json(e: AuditRow) -> dict[str, Any]:
    return {"id": e.id, "at": e.at_ms, "source": e.source, "who": e.who, "address": e.address,
            "action": e.action, "resource": e.resource, "result": e.result}


@router.get("/audit", responses=schemas.answers(schemas.AuditPage))
async def audit_log(
    request: Request,
    who: str | None = Query(None, max_length=200, description="the token name or user, exactly"),
    action: str | None = Query(None, max_length=64, description="an action (queue.purge) or its object (queue)"),
    since: int | None = Query(None, ge=0, le=2**62, description="epoch ms, inclusive"),
    until: int | None = Query(None, ge=0, le=2**62, description="epoch ms, exclusive"),
    limit: int = Query(100, ge=1, le=1000),
    cursor: int | None = Query(None, ge=1, le=2**63 - 1, description="`next_cursor` of the previous page"),
) -> Response:
    """The audit log, newest first, a page at a time (administrators)."""
    audit: AuditLog = request.app.state.audit
    rows = await audit.entries(who=who, action=action, since_ms=since, until_ms=until, before_id=cursor,
                               limit=limit)
    return json({"entries": [entry_json(e) for e in rows],
                 "next_cursor": rows[-1].id if len(rows) == limit else None})
