"""docs/api.md is the users' contract: every route of the server and every error code is in it."""

from __future__ import annotations

from pathlib import Path

from chunkmq.api import streams as stream_routes
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
