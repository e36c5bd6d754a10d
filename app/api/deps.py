"""Small helpers shared by the route modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import Send

from chunkmq.broker.broker import Broker
from chunkmq.broker.view_json import dumps

if TYPE_CHECKING:  # loaded with the full app: a restart's first stage answers through send_json alone
    from starlette.requests import Request
    from starlette.responses import Response


def broker_of(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


def json(value: Any, status: int = 200) -> Response:
    """A JSON answer: views (app/broker/views.py) render as their JSON, other values as orjson does."""
    from starlette.responses import Response

    return Response(dumps(value), status_code=status, media_type="application/json")


def raw_json(body: bytes, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(body, status_code=status, media_type="application/json")


async def send_json(send: Send, body: bytes, status: int = 200) -> None:
    """A JSON answer straight through ASGI, for the plain ASGI routes (app/api/publish.py)."""
    await send_body(send, body, "application/json", status=status)


async def send_body(send: Send, body: bytes, media_type: str, extra: list[tuple[bytes, bytes]] | None = None,
                    status: int = 200) -> None:
    """An answer of any media type straight through ASGI."""
    headers = [(b"content-type", media_type.encode()), (b"content-length", b"%d" % len(body)), *(extra or ())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
