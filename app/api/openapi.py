"""The OpenAPI document tells the truth about the server: errors are 400 with API.md's error shape
(not FastAPI's 422 HTTPValidationError), declares answer 201, names have their pattern, /api/v1
needs a bearer token (so /docs has an Authorize button)."""

from __future__ import annotations

from typing import Any

NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:\-]{1,200}$"
_NAME_PARAMS = {"name", "queue", "group"}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    }},
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def _creates(path: str, method: str) -> bool:
    return (method == "put" and path in (
        "/api/v1/exchanges/{name}", "/api/v1/queues/{name}", "/api/v1/queues/{queue}/groups/{group}",
    )) or (method == "post" and path == "/api/v1/bindings")


def make_truthful(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for fastapi_only in ("HTTPValidationError", "ValidationError"):
        schemas.pop(fastapi_only, None)
    schemas["Error"] = _ERROR_SCHEMA
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            unroutable = path.endswith("/publish")
            responses.pop("422", None)
            responses["400"] = _error("Bad input: invalid_body, invalid_name, invalid_request, ...")
            if unroutable:
                responses["422"] = _error("unroutable: a mandatory publish matched no queue")
            if path.startswith("/api/v1"):
                op["security"] = [{"bearer": []}]
                responses["401"] = _error("unauthorized: no or invalid token")
                responses["403"] = _error("forbidden: the token lacks the permission")
            if _creates(path, method):
                ok = responses.get("200", {"description": "Already identical"})
                responses["201"] = {**ok, "description": "Created"}
                responses["200"] = {**ok, "description": "Already existed, identical"}
            responses.setdefault("default", _error("An error: {\"error\": {\"code\", \"message\"}}"))
            for param in op.get("parameters", []):
                if param.get("in") == "path" and param.get("name") in _NAME_PARAMS:
                    param.setdefault("schema", {})["pattern"] = NAME_PATTERN
    return schema
