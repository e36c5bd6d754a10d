"""/api/v1/bindings: exchange -> queue bindings."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.access import AUTHORIZE
from chunkmq.api.auth import Principal
from chunkmq.api.body import json_object
from chunkmq.api.deps import broker_of, json
from chunkmq.broker import views
from chunkmq.broker.errors import Forbidden, NotFound
from chunkmq.broker.names import DEFAULT_EXCHANGE_ALIAS
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/bindings", tags=["bindings"])


def may_bind(who: Principal, queue: str, exchange: str) -> None:
    """RabbitMQ's rule: binding writes to the queue and reads from the exchange."""
    if not who.may("write", queue) or not who.may("read", exchange or DEFAULT_EXCHANGE_ALIAS):
        raise Forbidden(f"the token {who.name!r} may not bind this queue to this exchange: binding needs write "
                        "on the queue and read on the exchange")


@router.get("", responses=schemas.answers(list[schemas.Binding]))
async def list_bindings(
    request: Request, exchange: str | None = None, queue: str | None = None, who: Principal = AUTHORIZE
) -> Response:
    bindings = views.binding_views(broker_of(request), exchange or None, queue or None)
    return json([b for b in bindings if who.sees(b.queue) or who.sees(b.exchange)])


@router.post("", openapi_extra=schemas.body(schemas.BindingCreate), responses=schemas.answers(
    schemas.Binding, codes.INVALID_NAME, codes.INVALID_BODY, codes.EXCHANGE_NOT_FOUND, codes.QUEUE_NOT_FOUND,
    codes.ALREADY_EXISTS, codes.BODY_TOO_LARGE, created=True))
async def create_binding(request: Request, who: Principal = AUTHORIZE) -> Response:
    body = await json_object(request)
    # RabbitMQ's rule: binding writes to the queue and reads from the exchange.
    if isinstance(body.get("queue"), str) and isinstance(body.get("exchange"), str):
        may_bind(who, body["queue"], body["exchange"])
    binding, created = await broker_of(request).bind(body)
    return json(views.binding_view(binding), 201 if created else 200)


@router.delete("/{binding_id}", status_code=204, responses=schemas.answers(
    None, codes.BINDING_NOT_FOUND, status=204, description="Deleted"))
async def delete_binding(binding_id: int, request: Request, who: Principal = AUTHORIZE) -> Response:
    broker = broker_of(request)
    binding = views.find_binding(broker, binding_id)
    if not who.sees(binding.queue) and not who.sees(binding.exchange):  # as if there were none (app/api/access.py)
        raise NotFound(f"binding {binding_id} not found", code=codes.BINDING_NOT_FOUND)
    may_bind(who, binding.queue, binding.exchange)
    await broker.unbind(binding_id)
    return Response(status_code=204)
