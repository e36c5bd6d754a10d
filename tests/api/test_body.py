"""Request bodies (app/api/body.py): read through ASGI messages with the size limit enforced before
and while reading, JSON objects only, integral floats as ints."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from chunkmq.api.body import integral, media_type, object_of, parse_json, read_body
from chunkmq.broker.errors import InvalidInput, TooLarge
from chunkmq.wire import codes


def _receive(*chunks: bytes, disconnect: bool = False) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI receive callable that sends `chunks` as one request body."""
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    if disconnect:
        messages[-1]["more_body"] = True
        messages.append({"type": "http.disconnect"})
    queue = iter(messages)

    async def receive() -> dict[str, Any]:
        return next(queue)

    return receive


def test_read_body_joins_chunks_and_enforces_the_limit() -> None:
    async def main() -> None:
        assert await read_body(_receive(b"ab", b"cd", b""), None, 10) == b"abcd"
        assert await read_body(_receive(b"x" * 10), "10", 10) == b"x" * 10
        with pytest.raises(TooLarge) as declared:  # refused on Content-Length, before reading
            await read_body(_receive(), "11", 10, codes.BODY_TOO_LARGE)
        assert declared.value.code == codes.BODY_TOO_LARGE and declared.value.status == 413
        with pytest.raises(TooLarge) as streamed:  # no (or a lying) Content-Length: counted while reading
            await read_body(_receive(b"x" * 6, b"x" * 6), "5", 10)
        assert streamed.value.code == codes.BATCH_TOO_LARGE
        with pytest.raises(InvalidInput, match="disconnected"):
            await read_body(_receive(b"ab", disconnect=True), None, 10)

    asyncio.run(main())


def test_json_objects_only() -> None:
    assert object_of(b'{"a": [1, 2.0, 2.5], "b": {"c": 3e0}}') == {"a": [1, 2, 2.5], "b": {"c": 3}}
    assert object_of(b"", required=False) == {}
    for raw, says in ((b"", "required"), (b"{nope", "not valid JSON"), (b"[1]", "must be a JSON object"),
                      (b"null", "must be a JSON object")):
        with pytest.raises(InvalidInput, match=says):
            object_of(raw)
    assert parse_json(b"[1]") == [1]


def test_integral_and_media_type() -> None:
    assert integral(28.0) == 28 and type(integral(28.0)) is int
    assert integral(2.0**63) == 2.0**63  # past 64 bits: stays a float
    assert integral("1.0") == "1.0"
    assert media_type("Application/JSON; charset=utf-8") == "application/json" and media_type(None) == ""
