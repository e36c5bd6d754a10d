"""The stored blob of a message: the fast path and the general path must store the same members."""

from __future__ import annotations

from typing import Any

import pytest

from app.broker.errors import InvalidInput
from app.broker.message import MessageLimits, _parse_any, decode_data, parse_batch, parse_message, render

LIMITS = MessageLimits(max_headers=64, max_header_bytes=64 * 1024)

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
    fast, general = parse_message(raw, "ex", 0, LIMITS), _parse_any(raw, "ex", 0, LIMITS)
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
        parse_message(raw, "ex", 0, LIMITS)


def _refused(raw: dict[str, Any], limits: MessageLimits = LIMITS) -> str:
    """The message of the 400 for the second message of a batch (so the index is checked too)."""
    with pytest.raises(InvalidInput) as info:
        parse_batch([{"body": "ok"}, raw], "ex", limits)
    return info.value.message


def test_header_count_is_bounded() -> None:
    headers = {f"h{i}": "v" for i in range(100_000)}
    assert "messages[1].headers has 100000 entries; at most 64" in _refused({"body": "x", "headers": headers})
    at_limit = {f"h{i}": "v" for i in range(64)}
    assert parse_message({"body": "x", "headers": at_limit}, "ex", 0, LIMITS).headers == at_limit
    assert "has 65 entries" in _refused({"body": "x", "headers": {**at_limit, "a": "b"}})


def test_header_bytes_are_bounded_in_utf8_bytes() -> None:
    limits = MessageLimits(max_headers=64, max_header_bytes=8)
    assert parse_message({"body": "x", "headers": {"ab": "cdefgh"}}, "ex", 0, limits).headers == {"ab": "cdefgh"}
    message = _refused({"body": "x", "headers": {"ab": "cdefghi"}}, limits)
    assert "messages[1].headers hold more than 8 bytes" in message
    _refused({"body": "x", "headers": {"a": "€€€"}}, limits)  # 10 bytes in 4 characters
    big = {"k": "v" * (64 * 1024)}
    assert "bytes" in _refused({"body": "x", "headers": big})


@pytest.mark.parametrize("field", ["routing_key", "header name", "header value", "tag", "idempotency_key"])
@pytest.mark.parametrize("plain", [True, False])
def test_nul_is_refused_in_every_named_field(field: str, plain: bool) -> None:
    raw: dict[str, Any] = {"body": "a\0body may hold NUL"}
    if not plain:  # the general path, with every field present
        raw |= {"routing_key": "r", "headers": {"k": "v"}, "tag": "t", "idempotency_key": "i"}
    if field == "header name":
        raw["headers"] = {"bad\0name": "v"}
    elif field == "header value":
        raw["headers"] = {"k": "bad\0value"}
    else:
        raw[field] = "bad\0value"
    name = "headers" if field.startswith("header") else field
    message = _refused(raw)
    assert f"messages[1].{name}" in message and "NUL" in message


def test_nul_in_a_body_is_kept() -> None:
    assert decode_data(parse_message({"body": "a\0b"}, "ex", 0, LIMITS).data)["body"] == "a\0b"
