"""Request bodies: read raw, parse with orjson, check size and shape (no pydantic on the hot path)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request

from app.broker.errors import InvalidInput, TooLarge


async def json_body(request: Request, max_bytes: int, *, required: bool = True) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise TooLarge(f"the request body is larger than {max_bytes} bytes", code="batch_too_large")
    raw = await request.body()
    if len(raw) > max_bytes:
        raise TooLarge(f"the request body is larger than {max_bytes} bytes", code="batch_too_large")
    if not raw:
        if required:
            raise InvalidInput("a JSON body is required")
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None


async def json_object(request: Request, max_bytes: int = 1024 * 1024, *, required: bool = True) -> dict[str, Any]:
    body = await json_body(request, max_bytes, required=required)
    if type(body) is not dict:
        raise InvalidInput("the body must be a JSON object")
    return body
