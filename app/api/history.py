"""/api/v1/queues/{q}/history and /groups/{g}/history: sampled series for charts (app/broker/history.py).

Columnar answers, the shape uPlot draws: `t` (epoch ms) and one list per metric, all the same length.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from chunkmq.api import schemas
from chunkmq.api.deps import broker_of, json
from chunkmq.broker import views
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/queues/{queue}", tags=["history"])

QUEUE_COLUMNS = ("messages", "bytes", "publish_rate", "deliver_rate")
GROUP_COLUMNS = ("lag", "lag_seconds", "ack_rate", "consumers", "ack_floor")

_SINCE = Query(None, ge=0, le=2**53, description="epoch ms of the oldest point (default: an hour ago)")
_STEP = Query(None, gt=0, le=86_400, description="seconds between points (default: the finest kept for `since`)")


@router.get("/history", responses=schemas.answers(schemas.QueueHistory, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND))
async def queue_history(
    queue: str, request: Request, since: int | None = _SINCE, step: float | None = _STEP,
) -> Response:
    broker = broker_of(request)
    q = views.find_queue(broker, queue)
    series = await broker.history.queue_series(q, since, step)
    return json({"queue": q.name, "step": series.step_ms / 1000, "since": series.since,
                 **series.columns(QUEUE_COLUMNS)})


@router.get("/groups/{group}/history", responses=schemas.answers(
    schemas.GroupHistory, codes.INVALID_NAME, codes.QUEUE_NOT_FOUND, codes.GROUP_NOT_FOUND))
async def group_history(
    queue: str, group: str, request: Request, since: int | None = _SINCE, step: float | None = _STEP,
) -> Response:
    broker = broker_of(request)
    q = views.find_queue(broker, queue)
    g = views.find_group(q, group)
    series = await broker.history.group_series(q, g.name, since, step)
    return json({"queue": q.name, "group": g.name, "step": series.step_ms / 1000, "since": series.since,
                 "floor_moved_at": broker.history.floor_moved_at(q.name, g.name),
                 **series.columns(GROUP_COLUMNS)})
