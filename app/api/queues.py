"""/api/v1/queues: declare, list, inspect, change, delete, purge, browse, search."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.access import AUTHORIZE
from chunkmq.api.auth import Principal
from chunkmq.api.body import json_object
from chunkmq.api.deps import broker_of, json, raw_json
from chunkmq.broker import search as searching
from chunkmq.broker.arrow import MEDIA_TYPE as ARROW_STREAM
from chunkmq.broker.arrow import browse_arrow
from chunkmq.broker.message import as_base64
from chunkmq.broker.names import check_name
from chunkmq.broker.views import find_queue, queue_page, queue_view, queue_views
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/queues", tags=["queues"])


PAGE_LIMIT = 100  # a page's default size when only `after` is given
MAX_PAGE_LIMIT = 1000


@router.get("", responses=schemas.answers(list[schemas.Queue], codes.INVALID_REQUEST))
async def list_queues(
    request: Request,
    who: Principal = AUTHORIZE,
    limit: int | None = Query(None, ge=1, le=MAX_PAGE_LIMIT, description="a page of at most this many queues"),
    after: str | None = Query(None, min_length=1, max_length=255,
                              description="the page after this queue name (the Link header's next)"),
) -> Response:
    """Every queue in name order; with `limit` or `after`, one page of them and, when more follow,
    a `Link: <...>; rel="next"` header (docs/api.md, Queues)."""
    broker = broker_of(request)
    if limit is None and after is None:
        return json([q for q in queue_views(broker) if who.sees(q.name)])
    size = limit or PAGE_LIMIT
    page, last = queue_page(broker, after, size, who.sees)
    response = json(page)
    if last is not None:
        query = urlencode({"limit": size, "after": last})
        response.headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
    return response


@router.get("/{name}", responses=schemas.answers(schemas.Queue, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND))
async def get_queue(name: str, request: Request) -> Response:
    broker = broker_of(request)
    return json(find_queue(broker, check_name(name, "queue name")))


@router.put("/{name}", openapi_extra=schemas.body(schemas.QueueDeclare, required=False), responses=schemas.answers(
    schemas.Queue, codes.INVALID_NAME, codes.INVALID_BODY, codes.PRECONDITION_FAILED, codes.ALREADY_EXISTS,
    codes.BODY_TOO_LARGE, created=True))
async def declare_queue(name: str, request: Request) -> Response:
    broker = broker_of(request)
    queue, created = await broker.declare_queue(name, await json_object(request, required=False))
    return json(queue_view(broker, queue), 201 if created else 200)


@router.patch("/{name}", openapi_extra=schemas.body(schemas.QueuePatch), responses=schemas.answers(
    schemas.Queue, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.BODY_TOO_LARGE))
async def update_queue(name: str, request: Request) -> Response:
    broker = broker_of(request)
    queue = await broker.update_queue(check_name(name, "queue name"), await json_object(request))
    return json(queue_view(broker, queue))


@router.delete("/{name}", status_code=204, responses=schemas.answers(
    None, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND, codes.PRECONDITION_FAILED, status=204, description="Deleted"))
async def delete_queue(
    name: str, request: Request, force: bool = False, who: Principal = AUTHORIZE
) -> Response:
    await broker_of(request).delete_queue(check_name(name, "queue name"), force)
    return Response(status_code=204)


@router.post("/{name}/purge", responses=schemas.answers(schemas.Purged, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND))
async def purge_queue(name: str, request: Request) -> Response:
    return json({"purged": broker_of(request).purge(check_name(name, "queue name"))})


@router.get("/{name}/scheduled",
            responses=schemas.answers(schemas.Scheduled, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND))
async def scheduled(name: str, request: Request, limit: int = Query(100, ge=1, le=1_000)) -> Response:
    """Delayed messages not due yet, the nearest first, with their due times."""
    return json(broker_of(request).scheduled_messages(check_name(name, "queue name"), limit))


@router.get("/{name}/messages", responses=schemas.answers(
    schemas.Page, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND,
    media={ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}}))
async def browse(
    name: str,
    request: Request,
    offset: int | None = Query(None, ge=0),
    timestamp: int | None = Query(None, ge=0, description="epoch ms: start at the first message at or after it"),
    limit: int = Query(100, ge=1, le=10_000),
    encoding: str = Query("auto", pattern="^(auto|base64)$"),
    format: str = Query("json", pattern="^(json|arrow)$", description="arrow: an Apache Arrow IPC stream"),
) -> Response:
    """Read by offset without a group (browsing, Spark)."""
    if offset is not None and timestamp is not None:  # both: from the later of the two
        offset, timestamp = max(offset, broker_of(request).offset_at(name, timestamp)), None
    broker = broker_of(request)
    if broker.cold and timestamp is None:  # chunks in the tier's bucket only: fetched off the loop
        await broker.warm(broker.queue(name), offset, limit)
    if format == "arrow":
        page, next_offset = browse_arrow(broker_of(request), name, offset, timestamp, limit)
        return Response(page, media_type=ARROW_STREAM, headers={"X-Next-Offset": str(next_offset)})
    body = broker_of(request).browse(name, offset, timestamp, limit)
    return raw_json(as_base64(body) if encoding == "base64" else body)


@router.post("/{name}/search", openapi_extra=schemas.body(schemas.SearchBody), responses=schemas.answers(
    schemas.SearchPage, codes.INVALID_NAME, codes.INVALID_BODY, codes.QUEUE_NOT_FOUND, codes.BODY_TOO_LARGE))
async def search(name: str, request: Request) -> Response:
    """Find messages by their body, headers, routing key, tag, id or idempotency key (docs/api.md, Search)."""
    broker = broker_of(request)
    queue = broker.queue(check_name(name, "queue name"))
    query = searching.parse(await json_object(request))
    result = await searching.search(broker, queue.id, query)
    return raw_json(searching.render_page(result, queue.name_json))
