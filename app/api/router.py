"""Every HTTP route of the API, in one list.

FastAPI tries routes in order, so the consumer-group routes (ack, nack, seek) come first. The
publish and pull routes are plain ASGI (app/api/publish.py, app/api/pull.py) and go ahead of all of
these.
"""

from __future__ import annotations

from fastapi import APIRouter

from chunkmq.api import alerts, bindings, definitions, exchanges, groups, history, operations, queues, streams

routers: tuple[APIRouter, ...] = tuple(
    m.router for m in (groups, streams, history, exchanges, queues, bindings, definitions, operations, alerts)
)
