"""/api/v1/definitions: export and import exchanges, queues, bindings, groups and token permissions
(app/broker/definitions.py). Administrators only."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.body import json_object
from chunkmq.api.deps import broker_of, json
from chunkmq.broker.definitions import export_definitions, import_definitions
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/definitions", tags=["definitions"])


@router.get("", responses=schemas.answers(schemas.Definitions))
async def export(request: Request) -> Response:
    return json(await export_definitions(broker_of(request)))


@router.post("", openapi_extra=schemas.body(schemas.Definitions), responses=schemas.answers(
    schemas.Imported, codes.INVALID_NAME, codes.INVALID_BODY, codes.EXCHANGE_NOT_FOUND, codes.QUEUE_NOT_FOUND,
    codes.PRECONDITION_FAILED, codes.ALREADY_EXISTS, codes.BODY_TOO_LARGE))
async def import_(request: Request) -> Response:
    """Checked whole first: 400 naming a bad entry, 409 naming a conflicting one, and then nothing is
    applied. Answers what was created and what already existed, and the secrets of created tokens."""
    body = await json_object(request)
    return json(await import_definitions(broker_of(request), body))
