"""Pulling over HTTP: `POST /api/v1/queues/{queue}/groups/{group}/pull`, a hot route as the publish
routes are (app/api/publish.py).

A long poll woken by a publish is one HTTP answer per message at low rates, and FastAPI's routing
through included routers, the Request object and dependency solving were the largest part of the
server's CPU per message on end-to-end latency (docs/benchmarks.md, "What dominates"). The route
is served ahead of the middleware stack (app/api/hot_routes.py), with the same guard and error
map, and OpenAPI describes it through `openapi_paths()`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Scope

from chunkmq.api.body import MAX_OBJECT_BYTES, header, object_of
from chunkmq.api.hot_routes import Answer, HotRoute, ok
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.fields import reject_unknown
from chunkmq.broker.names import check_name
from chunkmq.config import Settings
from chunkmq.wire import codes
from chunkmq.wire.batch import MEDIA_TYPE as BATCH_MEDIA_TYPE

MAX_PULL = 1000
MAX_WAIT_MS = 30_000
PATH = "/api/v1/queues/{queue}/groups/{group}/pull"


async def pull(scope: Scope, raw: bytes) -> Answer:
    """The endpoint of the pull route (app/api/hot_routes.py)."""
    broker: Broker = scope["app"].state.broker
    queue: str = scope["path_params"]["queue"]  # checked with the permission (app/api/access.py)
    group: str = scope["path_params"]["group"]
    body = object_of(raw, required=False)
    reject_unknown(body, ("max_messages", "wait_ms", "consumer", "ack"))
    max_messages = body.get("max_messages", 100)
    wait_ms = body.get("wait_ms", 0)
    consumer = body.get("consumer", "default")
    if type(max_messages) is not int or not 1 <= max_messages <= MAX_PULL:
        raise InvalidInput(f"max_messages must be an integer from 1 to {MAX_PULL}")
    if type(wait_ms) is not int or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise InvalidInput(f"wait_ms must be an integer from 0 to {MAX_WAIT_MS}")
    check_name(consumer, "consumer id")
    binary = BATCH_MEDIA_TYPE in (header(scope, b"accept") or "")
    if "ack" in body:
        # The previous batch's ack rides on the next pull: one round trip per batch instead of two.
        if type(body["ack"]) is not dict:
            raise InvalidInput('ack must be an object: {"offsets": [...]} or {"up_to": n}')
        try:
            broker.ack(queue, group, body["ack"])
        except InvalidInput as exc:
            raise InvalidInput(f"ack: {exc.message}", code=exc.code) from None
        if broker.durability == "fsync":  # else acks are written behind: nothing to wait for, no task
            durable = asyncio.ensure_future(broker.acks_durable())  # one fsync round covers it and others
            try:
                answer = await broker.pull(queue, group, max_messages, wait_ms, consumer, binary=binary)
            finally:
                await durable  # the answer acknowledges the ack: only once it survives a crash
            return _answer(answer, binary)
    return _answer(await broker.pull(queue, group, max_messages, wait_ms, consumer, binary=binary), binary)


_BATCH = BATCH_MEDIA_TYPE.encode()


def _answer(answer: bytes, binary: bool) -> Answer:
    return ok(answer, _BATCH) if binary else ok(answer)  # binary: a binary batch (docs/api.md "Binary batches")


def _limit(settings: Settings) -> tuple[int, str]:
    return MAX_OBJECT_BYTES, codes.BODY_TOO_LARGE


route = HotRoute(PATH, pull, _limit, eager=True)  # waits on a Wake, not asyncio.timeout (app/api/wake.py)


def openapi_paths() -> dict[str, Any]:
    """OpenAPI's description of the route, built with the full app (app/start.py: the first stage
    loads no pydantic schemas)."""
    from chunkmq.api import schemas

    return {
        PATH: {
            "post": {
                "tags": ["consumer groups"],
                "summary": "Pull",
                "operationId": "pull_api_v1_queues__queue__groups__group__pull_post",
                "parameters": [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                               for name in ("queue", "group")],
                "responses": schemas.answers(
                    schemas.Pulled, codes.INVALID_NAME, codes.INVALID_BODY, codes.INVALID_ACK, codes.QUEUE_NOT_FOUND,
                    codes.GROUP_NOT_FOUND, codes.PRECONDITION_FAILED, codes.BODY_TOO_LARGE),
                **schemas.body(schemas.PullBody, required=False),
            }
        }
    }
