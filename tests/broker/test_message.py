"""The stored blob of a message: the fast path and the general path must store the same members."""

from __future__ import annotations

from typing import Any

import pytest

from app.broker.errors import InvalidInput
from app.broker.message import _parse_any, decode_data, parse_message, render

SHAPES: list[dict[str, Any]] = [
    {"body": "plain"},
    {"body": 'quote " backslash \\ newline \n ünï'},
    {"body": "x", "routing_key": "orders.eu"},
    {"routing_key": "k", "body": ""},
    {"body": "x", "tag": "t"},
    {"body": "x", "headers": {"a": "b"}, "routing_key": "r", "tag": "t", "idempotency_key": "i"},
    {"body_base64": "AAEC"},
]


@pytest.mark.parametrize("raw", SHAPES)
def test_fast_and_general_paths_store_the_same_members(raw: dict[str, Any]) -> None:
    fast, general = parse_message(raw, "ex", 0), _parse_any(raw, "ex", 0)
    assert decode_data(fast.data) == decode_data(general.data)
    assert (fast.routing_key, fast.headers, fast.tag, fast.flags) == (
        general.routing_key, general.headers, general.tag, general.flags)
    members = decode_data(fast.data)
    assert {"exchange", "routing_key", "headers", "tag"} <= members.keys()
    rendered = render(b'"q"', 7, 0x2A, 1, fast.data, 1)
    assert rendered.startswith(b'{"queue":"q","offset":7,"id":"000000000000002a"')


@pytest.mark.parametrize(
    "raw",
    [{"body": "x", "routing_key": 5}, {"body": "x", "routing_key": "k" * 256}, {"body": "x", "colour": "red"},
     {"body": 5}, {"routing_key": "k"}, "text", {"body": "x", "body_base64": "AA=="}],
)
def test_bad_shapes_are_refused_on_either_path(raw: Any) -> None:
    with pytest.raises(InvalidInput):
        parse_message(raw, "ex", 0)
