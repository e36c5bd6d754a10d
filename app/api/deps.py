"""Small helpers shared by the route modules."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response
from starlette.types import Send

from app.broker.broker import Broker


def broker_of(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


def json(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value, default=str), status_code=status, media_type="application/json")


def raw_json(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


async def send_json(send: Send, body: bytes, status: int = 200) -> None:
    """A JSON answer straight through ASGI, for the plain ASGI routes (app/api/publish.py)."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
