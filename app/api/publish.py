"""Publishing over HTTP: the hot path. Raw body -> orjson -> broker -> orjson, no pydantic."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from app.api import schemas
from app.api.auth import Principal, authenticate
from app.api.body import json_body
from app.api.deps import broker_of, raw_json
from app.broker.errors import InvalidInput
from app.broker.names import DEFAULT_EXCHANGE_ALIAS, check_name, exchange_from_path

router = APIRouter(prefix="/api/v1", tags=["publish"])


def publish_args(body: Any) -> tuple[Any, bool]:
    """The messages and mandatory flag of a publish body (messages are checked by the broker)."""
    if type(body) is not dict:
        raise InvalidInput("the body must be a JSON object with a messages array")
    if not body.keys() <= {"messages", "mandatory"}:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(body.keys() - {'messages', 'mandatory'}))}")
    mandatory = body.get("mandatory", False)
    if type(mandatory) is not bool:
        raise InvalidInput("mandatory must be true or false")
    return body.get("messages"), mandatory


@router.post("/exchanges/{name}/publish", openapi_extra=schemas.body(schemas.PublishBody))
async def publish(name: str, request: Request, who: Principal = Depends(authenticate)) -> Response:
    """Publish a batch through an exchange (`amq.default` for the default exchange)."""
    exchange = exchange_from_path(name)
    who.check("write", exchange or DEFAULT_EXCHANGE_ALIAS)
    broker = broker_of(request)
    messages, mandatory = publish_args(await json_body(request, broker.settings.max_batch_bytes))
    outcome = await broker.publish(exchange, messages, mandatory)
    return raw_json(outcome.json())


@router.post("/queues/{name}/publish", openapi_extra=schemas.body(schemas.PublishBody))
async def publish_to_queue(name: str, request: Request, who: Principal = Depends(authenticate)) -> Response:
    """Publish a batch straight into one queue (no routing)."""
    who.check("write", check_name(name, "queue name"))
    broker = broker_of(request)
    messages, mandatory = publish_args(await json_body(request, broker.settings.max_batch_bytes))
    outcome = await broker.publish("", messages, mandatory, queue_name=name)
    return raw_json(outcome.json())
