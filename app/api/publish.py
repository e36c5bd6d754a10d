"""Publishing over HTTP: the hot path, served as plain ASGI.

Raw body -> orjson -> broker -> orjson, no pydantic, and none of FastAPI's per-request machinery:
the two publish routes are hot routes (app/api/hot_routes.py) whose endpoint takes the scope and the
body and returns the answer. Route matching through included routers, the Request object,
dependency solving and the Response object cost about half of the server's time on a one-message
publish (about 90 of 180 us, docs/decisions.md). They are served ahead of the middleware stack,
with the same guard and error map, and OpenAPI describes them through `openapi_paths()`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import Scope

from chunkmq.api.body import header, media_type, parse_json
from chunkmq.api.hot_routes import Answer, HotRoute, ok
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.names import exchange_from_path
from chunkmq.broker.publishing import PublishOutcome
from chunkmq.broker.wake import Wake
from chunkmq.config import Settings
from chunkmq.wire import codes
from chunkmq.wire.batch import MEDIA_TYPE as BATCH_MEDIA_TYPE

_FIELDS = frozenset({"messages", "mandatory"})


def publish_args(body: Any) -> tuple[Any, bool]:
    """The messages and mandatory flag of a publish body (messages are checked by the broker)."""
    if type(body) is not dict:
        raise InvalidInput("the body must be a JSON object with a messages array")
    if len(body) == 1 and "messages" in body:  # nearly every body
        return body["messages"], False
    if not body.keys() <= _FIELDS:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(body.keys() - _FIELDS))}")
    mandatory = body.get("mandatory", False)
    if type(mandatory) is not bool:
        raise InvalidInput("mandatory must be true or false")
    return body.get("messages"), mandatory


def binary_mandatory(scope: Scope) -> bool:
    """A binary body has no room for the mandatory flag: it is the query parameter ?mandatory=true."""
    query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)  # as Starlette's QueryParams
    values = [value for name, value in query if name == "mandatory"]
    if not values:
        return False
    if values != ["true"] and values != ["false"]:
        raise InvalidInput("mandatory must be true or false", code=codes.INVALID_REQUEST)
    return values == ["true"]


class PublishEndpoint:
    """The endpoint of `POST /api/v1/exchanges/{name}/publish` (through an exchange; `amq.default`
    is the default exchange) or, with ``to_queue``, `POST /api/v1/queues/{name}/publish`."""

    def __init__(self, *, to_queue: bool) -> None:
        self.to_queue = to_queue

    def __call__(self, scope: Scope, raw: bytes) -> Answer | Awaitable[Answer]:
        """The answer, or once the publish must wait for its fsync (fsync=always) an awaitable of it."""
        broker: Broker = scope["app"].state.broker
        name: str = scope["path_params"]["name"]  # checked with the permission (app/api/access.py)
        exchange = "" if self.to_queue else exchange_from_path(name)
        content_type = header(scope, b"content-type")
        binary = content_type != "application/json" and media_type(content_type) == BATCH_MEDIA_TYPE
        if binary:
            messages, mandatory = raw, binary_mandatory(scope)  # parsed by the broker, column by column
        else:
            messages, mandatory = publish_args(parse_json(raw))
        binary_answer = binary and BATCH_MEDIA_TYPE in (header(scope, b"accept") or "")
        outcome, wake = broker.begin_publish(exchange, messages, mandatory,
                                             queue_name=name if self.to_queue else None, binary_answer=binary_answer)
        if wake is not None:
            return _when_durable(broker, wake, outcome, binary_answer)
        return _answer(outcome, binary_answer)


def _answer(outcome: PublishOutcome, binary_answer: bool) -> Answer:
    if binary_answer:
        return ok(outcome.results, _BATCH, ((b"chunkmq-durability", outcome.durability.encode()),))
    return ok(outcome.json())


async def _when_durable(broker: Broker, wake: Wake, outcome: PublishOutcome, binary_answer: bool) -> Answer:
    return _answer(await broker.durable(outcome, wake), binary_answer)


_BATCH = BATCH_MEDIA_TYPE.encode()


def _limit(settings: Settings) -> tuple[int, str]:
    return settings.max_batch_bytes, codes.BATCH_TOO_LARGE


routes = [
    HotRoute(path, PublishEndpoint(to_queue=to_queue), _limit, eager=True)  # waits only for fsync or a token's lookup
    for path, to_queue in (("/api/v1/exchanges/{name}/publish", False), ("/api/v1/queues/{name}/publish", True))
]


def _operation(operation_id: str, summary: str, description: str, *errors: str) -> dict[str, Any]:
    from chunkmq.api import schemas

    return {
        "post": {
            "tags": ["publish"],
            "summary": summary,
            "description": description + " The body may also be a binary batch (`Content-Type: "
                           "application/vnd.chunkmq.batch`, `?mandatory=true`): docs/api.md, Binary batches.",
            "operationId": operation_id,
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": schemas.answers(schemas.Published, *errors, description="Stored (docs/api.md, Publish)"),
            **schemas.body(schemas.PublishBody),
        }
    }


_PUBLISH_ERRORS = (
    codes.INVALID_NAME, codes.INVALID_BODY, codes.PRECONDITION_FAILED, codes.MESSAGE_TOO_LARGE,
    codes.BATCH_TOO_LARGE, codes.QUEUE_FULL, codes.STORAGE_FULL,
)


def openapi_paths() -> dict[str, Any]:
    """OpenAPI's description of the routes, built with the full app (app/start.py: the first stage
    loads no pydantic schemas)."""
    return {
        "/api/v1/exchanges/{name}/publish": _operation(
            "publish", "Publish", "Publish a batch through an exchange (`amq.default` for the default exchange).",
            codes.EXCHANGE_NOT_FOUND, codes.UNROUTABLE, *_PUBLISH_ERRORS,
        ),
        "/api/v1/queues/{name}/publish": _operation(
            "publish_to_queue", "Publish to queue", "Publish a batch straight into one queue (no routing).",
            codes.QUEUE_NOT_FOUND, *_PUBLISH_ERRORS,
        ),
    }
