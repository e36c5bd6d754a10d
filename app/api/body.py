"""Request bodies: read raw, parse with orjson, check size and shape (no pydantic on the hot path)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import Receive, Scope

from chunkmq.broker.errors import InvalidInput, TooLarge
from chunkmq.wire import codes

if TYPE_CHECKING:  # the hot routes read bodies without Starlette's requests (app/api/hot_routes.py)
    from starlette.requests import Request


async def read_body(
    receive: Receive, content_length: str | None, max_bytes: int, code: str = codes.BATCH_TOO_LARGE
) -> bytes:
    """The whole body of a plain ASGI request, refused with 413 as soon as it passes ``max_bytes``
    (before reading anything when Content-Length already says so). `code`: batch_too_large on the
    publish routes, body_too_large on the others."""
    if content_length is not None and content_length.isdigit() and int(content_length) > max_bytes:
        raise TooLarge(f"the request body is larger than {max_bytes} bytes", code=code)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: nobody will read the answer
            raise InvalidInput("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(f"the request body is larger than {max_bytes} bytes", code=code)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (`name` in lower case, as ASGI servers give names), or
    None: what starlette's `Headers(scope=scope).get` answers, without a KeyError per missing header
    (the hot routes look up four or five per request)."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, without parameters, lower case."""
    return content_type.split(";", 1)[0].strip().lower() if content_type else ""


def parse_json(raw: bytes, *, required: bool = True) -> Any:
    if not raw:
        if required:
            raise InvalidInput("a JSON body is required")
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None


_FLOAT = re.compile(rb"[0-9][.eE]")  # a JSON number with a fraction or exponent (or a string like it)


def integral(value: Any) -> Any:
    """`value` with every integral float within 64 bits made an int: JSON has one number type, so
    `28.0` is the integer 28 (as JSON Schema, and so the OpenAPI document, says)."""
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() and -(2**63) <= value < 2**63 else value
    if kind is dict:
        return {k: integral(v) for k, v in value.items()}
    if kind is list:
        return [integral(v) for v in value]
    return value


MAX_OBJECT_BYTES = 1024 * 1024  # the body of a route other than publish


async def json_object(request: Request, max_bytes: int = MAX_OBJECT_BYTES, *, required: bool = True) -> dict[str, Any]:
    """The body of a non-publish route: a JSON object, integral numbers as ints."""
    raw = await read_body(request.receive, request.headers.get("content-length"), max_bytes, codes.BODY_TOO_LARGE)
    return object_of(raw, required=required)


def object_of(raw: bytes, *, required: bool = True) -> dict[str, Any]:
    """`raw` as a JSON object, integral numbers as ints (json_object without the Request)."""
    body = parse_json(raw, required=required)
    if type(body) is not dict:
        raise InvalidInput("the body must be a JSON object")
    # Only a body with a float in it is walked (a pull's ack of a thousand offsets costs nothing).
    return integral(body) if _FLOAT.search(raw) else body  # type: ignore[no-any-return]
