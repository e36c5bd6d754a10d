"""docs/api.md is the users' contract: every route of the server and every error code is in it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from chunkmq.api import streams as stream_routes
from chunkmq.broker.queue import QueueSettings
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.wire import codes

DOC = (Path(__file__).parents[2] / "docs" / "api.md").read_text()


def test_every_openapi_route_is_documented() -> None:
    paths = create_app(Settings(auth="off")).openapi()["paths"]
    assert len(paths) > 20
    missing = [f"{method.upper()} {path}" for path, operations in paths.items() for method in operations
               if f"{method.upper()} {path}" not in DOC]
    assert not missing, missing


def test_every_websocket_route_is_documented() -> None:
    streams = [r.path for r in stream_routes.router.routes if "WebSocket" in type(r).__name__]  # type: ignore[attr-defined]
    assert len(streams) == 2
    for path in streams:
        assert f"GET {path}" in DOC, path


def test_every_error_code_is_documented() -> None:
    missing = [code for code in codes.STATUS if f"`{code}`" not in DOC]
    assert not missing, missing


def test_the_readme_points_to_the_contract_in_the_repository() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "docs/api.md" in readme and "../shared" not in readme


def _documented(name: str) -> set[str]:
    """The field names docs/api.md lists for `<name> object: `{...}``."""
    match = re.search(name + r' object: `\{(.*?)\}`', DOC, re.DOTALL)
    assert match, name
    return set(re.findall(r'"([a-z_]+)"', match.group(1)))


def _fields(schema: dict[str, Any], components: dict[str, Any], follow: bool = True) -> set[str]:
    """Property names of a schema, with those of the objects inside it when `follow`."""
    if "$ref" in schema:
        return _fields(components[schema["$ref"].rsplit("/", 1)[1]], components, follow)
    if schema.get("type") == "array":
        return _fields(schema["items"], components, follow)
    out = set(schema.get("properties", {}))
    if follow:
        for sub in schema.get("properties", {}).values():
            for option in sub.get("anyOf", [sub]):
                out |= _fields(option, components)
    return out


def test_the_documented_objects_are_what_the_server_answers() -> None:
    """docs/api.md's object lists against the schemas the server derives from its views (which
    tests/api/test_schemathesis.py holds the live answers to)."""
    components = create_app(Settings(auth="off")).openapi()["components"]["schemas"]
    settings = {f.name for f in dataclasses.fields(QueueSettings)}
    assert _documented("Exchange") == _fields(components["Exchange"], components)
    assert _documented("Binding") == _fields(components["Binding"], components)
    assert _documented("Group") == _fields(components["Group"], components)  # consumers' fields included
    assert _documented("Queue") == _fields(components["Queue"], components, follow=False) - settings
    assert _documented("Audit entry") == _fields(components["AuditEntry"], components)
    overview = re.search(r'`GET /api/v1/overview` → `\{(.*?)\}`\.', DOC, re.DOTALL)
    assert overview
    assert set(re.findall(r'"([a-z_]+)"', overview.group(1))) == _fields(components["Overview"], components)
    chunks = re.search(r'`GET /api/v1/storage/chunks` → .*?`\[\{(.*?)\}\]`', DOC, re.DOTALL)
    assert chunks and set(re.findall(r'"([a-z_]+)"', chunks.group(1))) == _fields(components["Chunk"], components)
    assert _documented("Search") == _fields(components["SearchPage"], components, follow=False)
    assert _documented("InFlight") == _fields(components["InFlight"], components)
    page = re.search(r'`GET \.\.\./inflight\?after=&limit=` → `\{(.*?)\}`', DOC, re.DOTALL)
    assert page and set(re.findall(r'"([a-z_]+)"', page.group(1))) == _fields(components["InFlightPage"], components,
                                                                              follow=False)
