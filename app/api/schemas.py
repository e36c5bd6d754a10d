"""Request shapes for the OpenAPI document (/docs, schemathesis).

Routes parse bodies with orjson and validate them by hand (app/broker does the checks), which is
several times faster than a pydantic model per message; these models only describe the contract.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from app.api.openapi import make_truthful

_NAME = r"^[A-Za-z0-9._:\-]{1,200}$"
_components: dict[str, Any] = {}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExchangeDeclare(_Strict):
    type: Literal["direct", "fanout", "topic", "headers", "hash"]
    alternate_exchange: str | None = Field(None, pattern=_NAME)


class QueueDeclare(_Strict):
    max_messages: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1)
    max_age_seconds: int | None = Field(None, ge=1)
    overflow: Literal["drop_head", "reject_publish"] = "drop_head"
    dead_letter_exchange: str | None = Field(None, pattern=_NAME)
    dead_letter_routing_key: str | None = Field(None, max_length=255)
    max_deliveries: int | None = Field(None, ge=1)
    ack_timeout_ms: int = Field(30_000, ge=1, le=86_400_000)


class QueuePatch(QueueDeclare):
    producer_visible: bool | None = None
    consumer_visible: bool | None = None


class BindingCreate(_Strict):
    exchange: str = Field(pattern=_NAME)
    queue: str = Field(pattern=_NAME)
    routing_key: str = Field("", max_length=255)
    arguments: dict[str, str] = Field(default_factory=dict)


class MessageIn(_Strict):
    body: str | None = Field(None, description="text body; exactly one of body / body_base64")
    body_base64: str | None = Field(None, description="binary body, base64")
    routing_key: str = Field("", max_length=255)
    headers: dict[str, str] = Field(default_factory=dict)
    tag: str | None = Field(None, min_length=1, max_length=255)
    idempotency_key: str | None = Field(None, min_length=1, max_length=255)


class PublishBody(_Strict):
    messages: list[MessageIn] = Field(min_length=1)
    mandatory: bool = False


class GroupDeclare(_Strict):
    start: Literal["earliest", "latest"] = "earliest"
    tag_filter: list[str] | None = Field(None, min_length=1, description="tags to receive; null: every message")



class AckBody(_Strict):
    offsets: list[int] | None = Field(None, description="per-offset ack")
    up_to: int | None = Field(None, ge=0, description="cumulative: every offset below it")


class PullBody(_Strict):
    max_messages: int = Field(100, ge=1, le=1000)
    wait_ms: int = Field(0, ge=0, le=30_000)
    consumer: str = Field("default", pattern=_NAME)
    ack: AckBody | None = Field(None, description="acknowledge first (same shape as /ack): saves a round trip")


class NackBody(_Strict):
    offsets: list[int] = Field(min_length=1)
    delay_ms: int = Field(0, ge=0, le=86_400_000)
    requeue: bool = Field(True, description="false: dead-letter (or drop) at once, as AMQP's reject")


class SeekBody(_Strict):
    to: Literal["earliest", "latest"] | None = None
    offset: int | None = Field(None, ge=0)
    timestamp: int | None = Field(None, ge=0)


def body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """`openapi_extra` for a route whose body is parsed by hand."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    _components.update(schema.pop("$defs", {}))
    _components[model.__name__] = schema
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    }


def install_openapi(app: FastAPI, plain_paths: dict[str, Any]) -> None:
    """OpenAPI from the FastAPI routes, plus ``plain_paths`` for the plain ASGI routes."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema["paths"].update(plain_paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_components)
            app.openapi_schema = make_truthful(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class Definitions(_Strict):
    """GET/POST /api/v1/definitions (app/broker/definitions.py); every section is optional."""

    chunkmq_version: str | None = None
    exchanges: list[dict[str, Any]] = Field(default_factory=list, description='[{"name", "type", "alternate_exchange"}]')
    queues: list[dict[str, Any]] = Field(default_factory=list, description='[{"name", ...queue settings}]')
    bindings: list[dict[str, Any]] = Field(
        default_factory=list, description='[{"exchange", "queue", "routing_key", "arguments"}]'
    )
    groups: list[dict[str, Any]] = Field(default_factory=list, description='[{"queue", "name", "tag_filter"}]')
    permissions: list[dict[str, Any]] = Field(
        default_factory=list, description='[{"token", "is_admin", "configure", "write", "read"}]'
    )
