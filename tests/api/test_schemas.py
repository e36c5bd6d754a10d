"""app/api/schemas.py: the request models describe what the broker's own checks accept (they are
never used to validate, so nothing else keeps them honest), and `body()`/`answers()` build the
OpenAPI fragments of a route."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from chunkmq.api import schemas
from chunkmq.broker.broker import parse_binding, parse_exchange
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.queue import QueueSettings

BIG = 2**63 - 1

QUEUES: list[dict[str, Any]] = [
    {}, {"max_messages": 1}, {"max_messages": 0}, {"max_messages": BIG}, {"max_messages": BIG + 1},
    {"max_bytes": -5}, {"max_age_seconds": 60}, {"overflow": "reject_publish"}, {"overflow": "drop_tail"},
    {"dead_letter_exchange": ""}, {"dead_letter_exchange": "amq.default"}, {"dead_letter_exchange": "dlx"},
    {"dead_letter_exchange": ".."}, {"dead_letter_routing_key": "k" * 255}, {"dead_letter_routing_key": "k" * 256},
    {"max_deliveries": 3}, {"max_deliveries": 0}, {"ack_timeout_ms": 1}, {"ack_timeout_ms": 0},
    {"ack_timeout_ms": 86_400_000}, {"ack_timeout_ms": 86_400_001}, {"max_messages": "5"}, {"max_messages": 1.5},
]
EXCHANGES: list[dict[str, Any]] = [
    {"type": "direct"}, {"type": "hash"}, {"type": "Direct"}, {}, {"type": "topic", "alternate_exchange": "ae"},
    {"type": "topic", "alternate_exchange": ""}, {"type": "topic", "alternate_exchange": "a b"},
    {"type": "fanout", "durable": True},
]
BINDINGS: list[dict[str, Any]] = [
    {"exchange": "e", "queue": "q"}, {"exchange": "e", "queue": "q", "routing_key": "a.*.b"},
    {"exchange": "e"}, {"exchange": "e", "queue": "q", "routing_key": "k" * 256},
    {"exchange": "e", "queue": "q", "arguments": {"x-match": "any", "h": "v"}},
    {"exchange": "e", "queue": "q", "arguments": {"h": 1}}, {"exchange": "e", "queue": "bad name"},
    {"exchange": "e", "queue": "q", "extra": 1},
]


def _accepts(check: Callable[[], object]) -> bool:
    try:
        check()
    except (InvalidInput, ValidationError):
        return False
    return True


def _agree(model: type[BaseModel], parse: Callable[[dict[str, Any]], object], bodies: list[dict[str, Any]]) -> None:
    verdicts = [(body, _accepts(lambda b=body: model.model_validate(b, strict=True)),  # type: ignore[misc]
                 _accepts(lambda b=body: parse(b))) for body in bodies]  # type: ignore[misc]
    assert [(body, schema) for body, schema, server in verdicts if schema != server] == []
    assert {server for _, _, server in verdicts} == {True, False}  # the samples try both answers


def test_queue_declare_describes_what_the_broker_accepts() -> None:
    _agree(schemas.QueueDeclare, lambda b: QueueSettings.parse(dict(b)), QUEUES)


def test_exchange_declare_describes_what_the_broker_accepts() -> None:
    _agree(schemas.ExchangeDeclare, lambda b: parse_exchange("e", b), EXCHANGES)


def test_binding_create_describes_what_the_broker_accepts() -> None:
    _agree(schemas.BindingCreate, parse_binding, BINDINGS)


def test_a_body_refers_to_its_model_registered_as_a_component() -> None:
    fragment = schemas.body(schemas.NackBody, required=False)
    assert fragment == {"requestBody": {"required": False, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/NackBody"}}}}}
    assert schemas._components["NackBody"]["additionalProperties"] is False


def test_answers_group_error_codes_by_status_and_say_created_or_existed() -> None:
    out = schemas.answers(schemas.Queue, "queue_not_found", "invalid_body", "precondition_failed",
                          "invalid_name", created=True)
    assert sorted(out) == ["200", "201", "400", "404", "409"]
    assert out["201"]["content"] == out["200"]["content"]
    assert (out["201"]["description"], out["200"]["description"]) == ("Created", "Existed already, identical")
    assert out["400"]["content"]["application/json"]["schema"]["properties"]["error"]["properties"]["code"][
        "enum"] == ["invalid_body", "invalid_name"]
    empty = schemas.answers(None, status=204)
    assert empty == {"204": {"description": "OK"}}
    listed = schemas.answers(list[schemas.Binding])
    assert listed["200"]["content"]["application/json"]["schema"] == {
        "type": "array", "items": {"$ref": "#/components/schemas/Binding"}}


@pytest.mark.parametrize("body", [{"offsets": []}, {"offsets": [-1]}, {"up_to": -1}, {}])
def test_ack_bodies_outside_the_shape_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        schemas.AckBody.model_validate(body)
