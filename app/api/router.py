"""Every HTTP and WebSocket route of the API, mounted behind its rule (app/api/access.py).

FastAPI tries routes in order, so the consumer-group routes (ack, nack, seek) come first. The
publish and pull routes are plain ASGI (app/api/publish.py, app/api/pull.py), wrapped in their rules
there, and go ahead of all of these.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, APIWebSocketRoute

from chunkmq.api import alerts, bindings, definitions, events, exchanges, groups, history, operations, queues, streams
from chunkmq.api import audit as audit_routes
from chunkmq.api.access import AUTHORIZE, RouteWithoutRule, rule

routers: tuple[APIRouter, ...] = tuple(
    m.router for m in (groups, streams, history, exchanges, queues, bindings, definitions, operations, alerts, events,
                       audit_routes)
)


def install(app: FastAPI) -> None:
    """Mount every route with `authorize` in front of it; a route without a rule is not mounted:
    RouteWithoutRule, and the app is not built."""
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute):
                for method in route.methods:
                    rule(method, route.path)
            elif isinstance(route, APIWebSocketRoute):
                rule("WEBSOCKET", route.path)
            else:
                raise RouteWithoutRule(f"{route!r}: only FastAPI routes are mounted here")
        app.include_router(router, dependencies=[AUTHORIZE])
