"""Request and response shapes for the OpenAPI document (/docs, schemathesis).

Routes parse bodies with orjson and validate them by hand (app/broker does the checks), which is
several times faster than a pydantic model per message, and render their answers with orjson;
these models only describe the contract (`body()` for requests, `answers()` for responses). The
read model's answers are described from the views they render (app/broker/views.py).
"""

from __future__ import annotations

import dataclasses
import enum
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, RootModel, TypeAdapter

from chunkmq.api.openapi import NAME_PATTERN, NEW_NAME_PATTERN, error_response, make_truthful, status_of
from chunkmq.broker import views
from chunkmq.broker.expiry import MAX_TTL_MS, MAX_TTL_SECONDS
from chunkmq.broker.scheduling import MAX_DELAY_MS
from chunkmq.meta.alert_kinds import ALERT_KINDS

_NAME = NAME_PATTERN
_NEW_NAME = NEW_NAME_PATTERN
_EXCHANGE = r"^(?:|(?!\.\.?$)[A-Za-z0-9._:\-]{1,200})$"  # a name, or "" for the default exchange
_INT64 = 2**63 - 1  # larger JSON numbers are not stored
_NO_NUL = r"^[^\x00]*$"  # routing keys, tags, headers: stored NUL-free
# strict base64 (binascii's strict_mode): groups of four, padding only at the end
_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_components: dict[str, Any] = {}


class _Strict(BaseModel):
    # Never used to validate; python-re only because pydantic's default engine has no look-ahead.
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")


def _not_null(schema: dict[str, Any]) -> None:
    """An optional field that may be left out but not sent as null (the server refuses null)."""
    schema.pop("default", None)


class ExchangeDeclare(_Strict):
    type: Literal["direct", "fanout", "topic", "headers", "hash"]
    alternate_exchange: str | None = Field(None, pattern=_NAME)


class QueueDeclare(_Strict):
    max_messages: int | None = Field(None, ge=1, le=_INT64)
    max_bytes: int | None = Field(None, ge=1, le=_INT64)
    max_age_seconds: int | None = Field(None, ge=1, le=_INT64)
    overflow: Literal["drop_head", "reject_publish"] = "drop_head"
    dead_letter_exchange: str | None = Field(
        None, pattern=_EXCHANGE, description='"" or amq.default: the default exchange')
    dead_letter_routing_key: str | None = Field(None, max_length=255)
    max_deliveries: int | None = Field(None, ge=1, le=_INT64)
    ack_timeout_ms: int = Field(30_000, ge=1, le=86_400_000)
    message_ttl_seconds: int | None = Field(
        None, ge=1, le=MAX_TTL_SECONDS, description="messages expire this long after publish; null: never")


class QueuePatch(QueueDeclare):
    producer_visible: bool = Field(None, json_schema_extra=_not_null)  # type: ignore[assignment]
    consumer_visible: bool = Field(None, json_schema_extra=_not_null)  # type: ignore[assignment]


class BindingCreate(_Strict):
    exchange: str = Field(pattern=_NAME, description="not the default exchange")
    queue: str = Field(pattern=_NAME)
    routing_key: str = Field("", max_length=255)
    arguments: dict[str, str] = Field(
        default_factory=dict, description="headers exchanges: x-match all|any and the headers to match",
        json_schema_extra={"properties": {"x-match": {"type": "string", "enum": ["all", "any"]}}},
    )


class _Message(_Strict):
    routing_key: str = Field("", max_length=255, pattern=_NO_NUL)
    headers: dict[str, str] | None = Field(
        None, max_length=64, description="at most CHUNKMQ_MAX_HEADERS entries",
        json_schema_extra={"propertyNames": {"pattern": _NO_NUL}, "additionalProperties": {
            "type": "string", "pattern": _NO_NUL}},
    )
    tag: str | None = Field(None, min_length=1, max_length=255, pattern=_NO_NUL)
    idempotency_key: str | None = Field(None, min_length=1, max_length=255, pattern=_NO_NUL)
    ttl_ms: int | None = Field(
        None, ge=1, le=MAX_TTL_MS, description="the message expires this long after publish (header x-expires-at)")
    delay_ms: int | None = Field(None, ge=0, le=MAX_DELAY_MS, description="deliver this much later (not with "
                                 "deliver_at_ms, nor in a batch with an idempotency_key)")
    deliver_at_ms: int | None = Field(None, ge=0, description="epoch ms to deliver at, at most 7 days from now")


class TextMessage(_Message):
    body: str = Field(description="a text body")


class BinaryMessage(_Message):
    body_base64: str = Field(pattern=_BASE64, description="a binary body, base64")


class PublishBody(_Strict):
    messages: list[TextMessage | BinaryMessage] = Field(
        min_length=1, description="at most CHUNKMQ_MAX_BATCH_MESSAGES (10,000): more is 413 batch_too_large")
    mandatory: bool = False


class GroupDeclare(_Strict):
    start: Literal["earliest", "latest"] = "earliest"
    tag_filter: list[Annotated[str, Field(min_length=1, max_length=255)]] | None = Field(
        None, min_length=1, description="tags to receive; null: every message")
    single_active_consumer: bool | None = Field(
        None, description="one attached consumer at a time receives the messages; null or absent: unchanged (off)")


class PauseBody(_Strict):
    until_ms: int | None = Field(
        None, gt=0, le=_INT64, description="epoch ms, in the future: the pause ends then; null: until resumed")


class ResumeBody(_Strict):
    pass


class AckOffsets(_Strict):
    offsets: list[Annotated[int, Field(ge=0, le=_INT64)]] = Field(
        min_length=1, max_length=100_000, description="per-offset ack")


class AckUpTo(_Strict):
    up_to: int = Field(ge=0, le=_INT64, description="cumulative: every offset below it")


AckBody = RootModel[AckOffsets | AckUpTo]


class PullBody(_Strict):
    max_messages: int = Field(100, ge=1, le=1000)
    wait_ms: int = Field(0, ge=0, le=30_000)
    consumer: str = Field("default", pattern=_NAME)
    ack: AckOffsets | AckUpTo = Field(
        None, description="acknowledge first (same shape as /ack): saves a round trip",  # type: ignore[arg-type]
        json_schema_extra=_not_null)


class NackBody(_Strict):
    offsets: list[Annotated[int, Field(ge=0, le=_INT64)]] = Field(min_length=1, max_length=100_000)
    delay_ms: int = Field(0, ge=0, le=86_400_000)
    requeue: bool = Field(True, description="false: dead-letter (or drop) at once, as AMQP's reject")


class SeekTo(_Strict):
    to: Literal["earliest", "latest"]


class SeekOffset(_Strict):
    offset: int = Field(ge=0, le=_INT64)


class SeekTimestamp(_Strict):
    timestamp: int = Field(ge=0, le=_INT64, description="epoch ms")


SeekBody = RootModel[SeekTo | SeekOffset | SeekTimestamp]


class SearchBody(_Strict):
    """POST /api/v1/queues/{name}/search (app/broker/search.py): every filter optional, combined by AND."""

    body_contains: str = Field(None, min_length=1, max_length=4096, pattern=_NO_NUL, json_schema_extra=_not_null)
    body_contains_base64: str = Field(None, min_length=4, pattern=_BASE64, json_schema_extra=_not_null)
    ignore_case: bool = False
    body_regex: str = Field(None, min_length=1, max_length=4096, description="RE2 syntax",
                            json_schema_extra=_not_null)
    header_equals: dict[str, str] = Field(None, min_length=1, max_length=64, json_schema_extra=_not_null)
    header_exists: list[Annotated[str, Field(min_length=1)]] = Field(
        None, min_length=1, max_length=64, json_schema_extra=_not_null)
    routing_key: str = Field(None, max_length=4096, pattern=_NO_NUL, json_schema_extra=_not_null)
    routing_key_prefix: str = Field(None, min_length=1, max_length=4096, pattern=_NO_NUL,
                                    json_schema_extra=_not_null)
    tag: str = Field(None, min_length=1, max_length=4096, pattern=_NO_NUL, json_schema_extra=_not_null)
    tag_prefix: str = Field(None, min_length=1, max_length=4096, pattern=_NO_NUL, json_schema_extra=_not_null)
    message_id: str = Field(None, pattern=r"^[0-9a-fA-F]{16}$", json_schema_extra=_not_null)
    idempotency_key: str = Field(None, min_length=1, max_length=4096, pattern=_NO_NUL, json_schema_extra=_not_null)
    json_path: str | list[Annotated[str, Field(min_length=2, max_length=4096)]] = Field(
        None, description='comparisons on a JSON body, all of which must hold: "$.order.total > 100"',
        json_schema_extra=_not_null)
    from_offset: int = Field(None, ge=0, le=_INT64, json_schema_extra=_not_null)
    to_offset: int = Field(None, ge=0, le=_INT64, description="exclusive", json_schema_extra=_not_null)
    from_timestamp: int = Field(None, ge=0, le=_INT64, description="epoch ms", json_schema_extra=_not_null)
    to_timestamp: int = Field(None, ge=0, le=_INT64, description="epoch ms, exclusive", json_schema_extra=_not_null)
    limit: int = Field(100, ge=1, le=1000)
    max_scan: int = Field(100_000, ge=1, le=10_000_000)
    max_ms: int = Field(1000, ge=1, le=10_000)
    cursor: str = Field(None, min_length=1, description="from a previous answer: go on where it stopped",
                        json_schema_extra=_not_null)


def _is_view(shape: Any) -> bool:
    return isinstance(shape, type) and dataclasses.is_dataclass(shape)


def _view_ref(view: type) -> dict[str, Any]:
    """A view's schema as a component (QueueView -> Queue), from the fields its JSON has
    (app/broker/views.py `as_json`): internal fields left out, flattened ones inline."""
    name = view.__name__.removesuffix("View")
    if name not in _components:
        _components[name] = {}  # taken: a view that holds itself ends here
        _components[name] = {"type": "object", **_fields_schema(view), "additionalProperties": False}
    return {"$ref": f"#/components/schemas/{name}"}


def _fields_schema(view: type) -> dict[str, Any]:
    hints = get_type_hints(view)
    properties: dict[str, Any] = {}
    for f in dataclasses.fields(view):
        if "internal" in f.metadata:
            continue
        if "flatten" in f.metadata:
            properties.update(_fields_schema(f.metadata["flatten"])["properties"])
            continue
        properties[f.name] = {**_type_schema(hints[f.name]), **f.metadata.get("schema", {})}
    return {"properties": properties, "required": list(properties)}


def _type_schema(tp: Any) -> dict[str, Any]:
    """The JSON schema of a view field's type, as orjson renders its values."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a) for a in args]}
    if origin in (tuple, list):
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if _is_view(tp):
        return _view_ref(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"type": "string", "enum": [m.value for m in tp]}
    simple = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}
    return {"type": simple[tp]} if tp in simple else {}


def _ref(shape: Any) -> dict[str, Any]:
    """The JSON schema of a view or a model (or a list of them), its models registered as components."""
    if _is_view(shape) or (get_origin(shape) is list and _is_view(get_args(shape)[0])):
        return _type_schema(shape)
    schema = TypeAdapter(shape).json_schema(ref_template="#/components/schemas/{model}")
    _components.update(schema.pop("$defs", {}))
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        _components[shape.__name__] = schema
        return {"$ref": f"#/components/schemas/{shape.__name__}"}
    return schema


def body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """`openapi_extra` for a route whose body is parsed by hand."""
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": _ref(model)}}}}


def answers(
    ok: Any, *errors: str, status: int = 200, created: bool = False, media: dict[str, Any] | None = None,
    description: str = "OK",
) -> dict[int | str, Any]:
    """`responses=` of a route: what it answers on success (`ok`: a model, list[Model] or None for no
    body; `created`: 201 on a create and 200 when it existed identically; `media`: other content
    types) and the error codes it can answer, grouped by status, each in API.md's error shape.
    Codes every route shares (auth, Host checks, FastAPI's own validation) are added by
    app/api/openapi.py. Documentation only: nothing is validated on the way out."""
    content = {"application/json": {"schema": _ref(ok)}} if ok is not None else {}
    content.update(media or {})
    success: dict[str, Any] = {"description": description, **({"content": content} if content else {})}
    out: dict[int | str, Any] = {}
    if created:
        out["201"] = {**success, "description": "Created"}
        out["200"] = {**success, "description": "Existed already, identical"}
    else:
        out[str(status)] = success
    by_status: dict[int, list[str]] = {}
    for code in errors:
        by_status.setdefault(status_of(code), []).append(code)
    for number, listed in sorted(by_status.items()):
        out[str(number)] = error_response(listed)
    return out


def install_openapi(app: FastAPI, plain_paths: dict[str, Any], *, secured: bool) -> None:
    """OpenAPI from the FastAPI routes, plus ``plain_paths`` for the plain ASGI routes; `secured`:
    tokens are on (CHUNKMQ_AUTH), so /api/v1 declares the bearer scheme."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema["paths"].update(plain_paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_components)
            app.openapi_schema = make_truthful(schema, secured=secured)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class DefinedExchange(ExchangeDeclare):
    name: str = Field(pattern=_NEW_NAME)


class DefinedQueue(QueueDeclare):
    name: str = Field(pattern=_NEW_NAME)


class DefinedBinding(BindingCreate):
    pass


class DefinedGroup(GroupDeclare):
    queue: str = Field(pattern=_NAME)
    name: str = Field(pattern=_NAME)


class Permission(_Strict):
    token: str = Field(min_length=1, max_length=200, description="the token's name")
    is_admin: bool = False
    configure: str = Field("", json_schema_extra={"format": "regex"}, description="a regular expression over names")
    write: str = Field("", json_schema_extra={"format": "regex"})
    read: str = Field("", json_schema_extra={"format": "regex"})


class Definitions(_Strict):
    """GET/POST /api/v1/definitions (app/broker/definitions.py); every section is optional."""

    chunkmq_version: str | None = None
    exchanges: list[DefinedExchange] = Field(default_factory=list)
    queues: list[DefinedQueue] = Field(default_factory=list)
    bindings: list[DefinedBinding] = Field(default_factory=list)
    groups: list[DefinedGroup] = Field(default_factory=list)
    permissions: list[Permission] = Field(default_factory=list)


# ---------------------------------------------------------------------- answers
# What the routes answer, for the document only: nothing is validated on the way out.
# tests/api/test_schemathesis.py checks the live answers against these.
#
# The read model's answers are the views themselves (app/broker/views.py): `json(view)` renders a view's
# fields and `answers(view)` describes the same fields, so the body and its schema have one source.
Exchange = views.ExchangeView
Queue = views.QueueView
Group = views.GroupView
Binding = views.BindingView
Chunk = views.ChunkView
Overview = views.Overview
InFlightPage = views.InFlightPageView

# The other answers are written here: the hot paths (publish, pull, browse) send pre-encoded bytes.


class Message(BaseModel):
    """A message as delivered: `body` for text, `body_base64` for bytes."""

    queue: str | None = Field(description="null: a message no queue holds (unroutable)")
    offset: int = Field(description="-1: a message no queue holds")
    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    timestamp: int = Field(description="epoch ms")
    exchange: str
    routing_key: str
    headers: dict[str, str]
    tag: str | None
    body: str | None = Field(None, description="a text body")
    body_base64: str | None = Field(None, description="a binary body (or any, with encoding=base64)")
    delivery_count: int


class Page(BaseModel):
    messages: list[Message]
    next_offset: int


class SearchPage(BaseModel):
    messages: list[Message]
    scanned: int = Field(description="messages looked at by this request")
    elapsed_ms: float
    next_offset: int = Field(description="where the scan stopped")
    cursor: str | None = Field(description="null: the range is done; else send {\"cursor\": ...} to go on")
    stopped: Literal["limit", "max_scan", "max_ms", "end"]


class Pulled(BaseModel):
    messages: list[Message]


class Acked(BaseModel):
    ack_floor: int
    acked: int
    not_in_flight: list[int]


class Nacked(BaseModel):
    ack_floor: int
    nacked: int
    not_in_flight: list[int]
    exhausted: int = Field(description="past max_deliveries: dead-lettered, or dropped")


class Purged(BaseModel):
    purged: int


class Routed(BaseModel):
    queue: str
    offset: int | None = Field(description="null: a delayed message, which takes its offset when due")


class PublishResult(BaseModel):
    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    routed: list[Routed]
    duplicate: bool
    deliver_at_ms: int | None = Field(None, description="a delayed message's due time (epoch ms)")


class ScheduledMessage(BaseModel):
    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    deliver_at_ms: int = Field(description="epoch ms it is due")
    timestamp: int = Field(description="epoch ms it was published")
    exchange: str
    routing_key: str
    headers: dict[str, str]
    tag: str | None
    body: str | None = Field(None, description="a text body")
    body_base64: str | None = Field(None, description="a binary body")


class Scheduled(BaseModel):
    scheduled: int = Field(description="delayed messages of the queue not due yet")
    messages: list[ScheduledMessage] = Field(description="the nearest, first due first")


class Published(BaseModel):
    results: list[PublishResult] = Field(description="one per message, in order")
    durability: Literal["fsync", "interval", "none"]


class QueueHistory(BaseModel):
    queue: str
    step: float
    since: int
    t: list[int]
    messages: list[float]
    bytes: list[float]
    publish_rate: list[float]
    deliver_rate: list[float]


class GroupHistory(BaseModel):
    queue: str
    group: str
    step: float
    since: int
    floor_moved_at: int | None
    t: list[int]
    lag: list[float]
    lag_seconds: list[float]
    ack_rate: list[float]
    consumers: list[float]
    ack_floor: list[float]


class SectionCounts(BaseModel):
    exchanges: int
    queues: int
    bindings: int
    groups: int
    permissions: int


class CreatedToken(BaseModel):
    token: str
    secret: str


class Imported(BaseModel):
    created: SectionCounts
    unchanged: SectionCounts
    tokens: list[CreatedToken] = Field(description="the secrets of the tokens created, shown only here")


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "starting", "storage_full"]
    reason: str | None = None


class AlertRule(BaseModel):
    id: int = Field(ge=1, le=2**63 - 1)
    kind: Literal[ALERT_KINDS]  # type: ignore[valid-type]
    queue: str
    group: str
    threshold: float
    for_seconds: float
    renotify_seconds: float
    window_seconds: float
    recipients: list[str]
    enabled: bool
    created_at: str = Field(description="ISO 8601")
    updated_at: str = Field(description="ISO 8601")


class Alert(BaseModel):
    rule_id: int
    kind: str
    queue: str
    group: str
    state: Literal["pending", "firing", "resolved"]
    value: float
    threshold: float
    since: int = Field(description="epoch ms")
    fired_at: int | None = Field(description="epoch ms")


class Alerts(BaseModel):
    alerts: list[Alert]


class AlertEvent(BaseModel):
    id: int
    at: int = Field(description="epoch ms")
    type: Literal["transition", "mail"]
    state: str
    previous: str | None
    rule_id: int | None
    kind: str
    queue: str
    group: str
    value: float | None
    threshold: float | None
    detail: str


class MailSent(BaseModel):
    sent: bool
    answer: str = Field(description="the SMTP server's answer")


class Smtp(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    host: str
    port: int
    starttls: bool
    tls: bool
    user: str
    password_set: bool
    from_: str = Field(alias="from")
    to: list[str]


class MailSettings(BaseModel):
    smtp: Smtp
    console_url: str
    interval_seconds: float
    digest_seconds: float


class AuditEntry(BaseModel):
    id: int
    at: int = Field(description="epoch ms")
    source: Literal["api", "console", "cli"]
    who: str = Field(description="the token's name, the console user or the OS user of the CLI; empty when unknown")
    address: str = Field(description="the client's address; `local` for the CLI")
    action: str = Field(description="e.g. queue.purge, token.create, login")
    resource: str = Field(description="the object's name(s), e.g. `orders` or `orders/billing`")
    result: str = Field(description="`ok` or the error code")


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: int | None = Field(description="`cursor` of the next (older) page; null on the last")
