"""/api/v1/exchanges: declare, list, inspect, delete."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.access import AUTHORIZE
from chunkmq.api.auth import Principal
from chunkmq.api.body import json_object
from chunkmq.api.deps import broker_of, json
from chunkmq.broker.names import DEFAULT_EXCHANGE_ALIAS, exchange_from_path
from chunkmq.broker.views import exchange_view, exchange_views, find_exchange
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/exchanges", tags=["exchanges"])


@router.get("", responses=schemas.answers(list[schemas.Exchange]))
async def list_exchanges(request: Request, who: Principal = AUTHORIZE) -> Response:
    return json([e for e in exchange_views(broker_of(request)) if who.sees(e.name or DEFAULT_EXCHANGE_ALIAS)])


@router.get("/{name}", responses=schemas.answers(schemas.Exchange, codes.INVALID_NAME, codes.EXCHANGE_NOT_FOUND))
async def get_exchange(name: str, request: Request) -> Response:
    return json(find_exchange(broker_of(request), exchange_from_path(name)))


@router.put("/{name}", openapi_extra=schemas.body(schemas.ExchangeDeclare), responses=schemas.answers(
    schemas.Exchange, codes.INVALID_NAME, codes.INVALID_BODY, codes.PRECONDITION_FAILED, codes.ALREADY_EXISTS,
    codes.BODY_TOO_LARGE, created=True))
async def declare_exchange(name: str, request: Request) -> Response:
    exchange, created = await broker_of(request).declare_exchange(name, await json_object(request))
    return json(exchange_view(exchange), 201 if created else 200)


@router.delete("/{name}", status_code=204, responses=schemas.answers(
    None, codes.INVALID_NAME, codes.INVALID_BODY, codes.EXCHANGE_NOT_FOUND, codes.PRECONDITION_FAILED,
    status=204, description="Deleted"))
async def delete_exchange(
    name: str, request: Request, if_unused: bool = False, who: Principal = AUTHORIZE
) -> Response:
    await broker_of(request).delete_exchange(exchange_from_path(name), if_unused)
    return Response(status_code=204)
