"""The OpenAPI document tells the truth about the server: errors are API.md's error shape with the
codes each route can answer (not FastAPI's 422 HTTPValidationError), declares answer 201, names
have their pattern, and /api/v1 declares a bearer token when tokens are on (so /docs has an
Authorize button), none when they are off."""

from __future__ import annotations

import copy
from typing import Any

from chunkmq.wire import codes

NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:\-]{1,200}$"
NEW_NAME_PATTERN = r"^(?!\.\.?$)(?!amq\.)[A-Za-z0-9._:\-]{1,200}$"  # amq. is reserved (declares)
_EXCHANGE_DECLARE = r"^(?!\.\.?$)(?!amq\.(?!default$))[A-Za-z0-9._:\-]{1,200}$"  # amq.default as it is
_DECLARES = {"/api/v1/exchanges/{name}", "/api/v1/queues/{name}"}
_NAME_PARAMS = {"name", "queue", "group"}
_CHANGES = {"post", "put", "patch", "delete"}
_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    }},
}
_SERVER_SIDE = ("500 internal_error, storage_error, corrupt_chunk, metadata_error (the server's fault); "
                "503 unavailable; 405 method_not_allowed")


def status_of(code: str) -> int:
    return codes.STATUS[code]


def error_response(listed: list[str]) -> dict[str, Any]:
    """An error answer whose `code` is one of `listed`."""
    schema = {**_ERROR_SCHEMA, "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string", "enum": listed}, "message": {"type": "string"}},
    }}}
    return {"description": ", ".join(listed), "content": {"application/json": {"schema": schema}}}


def _add(responses: dict[str, Any], *listed: str) -> None:
    for code in listed:
        status = str(status_of(code))
        if status not in responses:
            responses[status] = error_response([code])
            continue
        enum: list[str] = responses[status]["content"]["application/json"]["schema"]["properties"]["error"][
            "properties"]["code"]["enum"]
        if code not in enum:
            enum.append(code)
            responses[status]["description"] = ", ".join(enum)


def make_truthful(schema: dict[str, Any], *, secured: bool) -> dict[str, Any]:
    schema = copy.deepcopy(schema)  # the routes' response dicts are shared by every app made
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for fastapi_only in ("HTTPValidationError", "ValidationError"):
        schemas.pop(fastapi_only, None)
    schemas["Error"] = _ERROR_SCHEMA
    if secured:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                del responses["422"]  # FastAPI's validation error: answered as 400 invalid_request
            api = path.startswith("/api/v1")
            if op.get("parameters"):  # FastAPI checks their types and bounds
                _add(responses, codes.INVALID_REQUEST)
            if api and secured:
                op["security"] = [{"bearer": []}]
                _add(responses, codes.UNAUTHORIZED, codes.FORBIDDEN)
            if not secured:  # app/api/guard.py
                _add(responses, codes.INVALID_HOST)
                if api and method in _CHANGES:
                    _add(responses, codes.CROSS_ORIGIN, codes.UNSUPPORTED_MEDIA_TYPE)
            responses["default"] = {"description": _SERVER_SIDE,
                                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            for param in op.get("parameters", []):
                if param.get("in") == "path" and param.get("name") in _NAME_PARAMS:
                    pattern = NAME_PATTERN
                    if method == "put" and path in _DECLARES:
                        pattern = _EXCHANGE_DECLARE if path.startswith("/api/v1/exchanges") else NEW_NAME_PATTERN
                    param.setdefault("schema", {})["pattern"] = pattern
    return schema
