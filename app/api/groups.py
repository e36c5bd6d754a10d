"""/api/v1/queues/{q}/groups: consumer groups over stateless HTTP calls."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.body import json_object
from chunkmq.api.deps import broker_of, json
from chunkmq.broker.names import check_name
from chunkmq.broker.views import find_group, find_queue, group_view, in_flight
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/queues/{queue}/groups", tags=["consumer groups"])


@router.get("", responses=schemas.answers(list[schemas.Group], codes.INVALID_NAME, codes.QUEUE_NOT_FOUND))
async def list_groups(queue: str, request: Request) -> Response:
    broker = broker_of(request)
    return json(find_queue(broker, check_name(queue, "queue name")).groups)


@router.get("/{group}", responses=schemas.answers(
    schemas.Group, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND))
async def get_group(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    return json(find_group(find_queue(broker, check_name(queue, "queue name")), group))


@router.put("/{group}", openapi_extra=schemas.body(schemas.GroupDeclare, required=False), responses=schemas.answers(
    schemas.Group, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.PRECONDITION_FAILED,
    codes.ALREADY_EXISTS, codes.BODY_TOO_LARGE, created=True))
async def declare_group(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    g, created = await broker.declare_group(queue, group, await json_object(request, required=False))
    return json(group_view(broker, broker.queue(queue), g), 201 if created else 200)


@router.post("/{group}/ack", openapi_extra=schemas.body(schemas.AckBody), responses=schemas.answers(
    schemas.Acked, codes.INVALID_NAME, codes.INVALID_BODY, codes.INVALID_ACK, codes.QUEUE_NOT_FOUND,
    codes.GROUP_NOT_FOUND, codes.BODY_TOO_LARGE))
async def ack(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    result = broker.ack(queue, group, await json_object(request))
    await broker.acks_durable()
    return json(result)


@router.post("/{group}/nack", openapi_extra=schemas.body(schemas.NackBody), responses=schemas.answers(
    schemas.Nacked, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND,
    codes.BODY_TOO_LARGE))
async def nack(queue: str, group: str, request: Request) -> Response:
    return json(broker_of(request).nack(queue, group, await json_object(request)))


@router.post("/{group}/seek", openapi_extra=schemas.body(schemas.SeekBody), responses=schemas.answers(
    schemas.Group, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND,
    codes.BODY_TOO_LARGE))
async def seek(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    g = broker.seek(queue, group, await json_object(request))
    return json(group_view(broker, broker.queue(queue), g))


@router.post("/{group}/pause", openapi_extra=schemas.body(schemas.PauseBody, required=False), responses=schemas.answers(
    schemas.Group, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND,
    codes.BODY_TOO_LARGE))
async def pause(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    g = await broker.pause_group(queue, group, await json_object(request, required=False))
    return json(group_view(broker, broker.queue(queue), g))


@router.post("/{group}/resume", openapi_extra=schemas.body(schemas.ResumeBody, required=False),
             responses=schemas.answers(schemas.Group, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND,
                                       codes.GROUP_NOT_FOUND, codes.BODY_TOO_LARGE))
async def resume(queue: str, group: str, request: Request) -> Response:
    broker = broker_of(request)
    g = await broker.resume_group(queue, group, await json_object(request, required=False))
    return json(group_view(broker, broker.queue(queue), g))


@router.delete("/{group}", status_code=204, responses=schemas.answers(
    None, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND, status=204, description="Deleted"))
async def delete_group(queue: str, group: str, request: Request) -> Response:
    await broker_of(request).delete_group(queue, group)
    return Response(status_code=204)


@router.get("/{group}/inflight", responses=schemas.answers(
    schemas.InFlightPage, codes.INVALID_NAME, codes.INVALID_REQUEST, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND))
async def get_in_flight(
    queue: str, group: str, request: Request,
    after: int | None = Query(None, ge=0, le=2**63 - 1, description="the page after this offset (next_after)"),
    limit: int = Query(100, ge=1, le=1000),
) -> Response:
    """The messages the group delivered and has not had acknowledged, by offset: consumer, delivery count, deadline."""
    page = in_flight(broker_of(request), check_name(queue, "queue name"), group, -1 if after is None else after, limit)
    return json(page)
