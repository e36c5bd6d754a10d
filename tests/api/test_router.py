"""app/api/router.py: every API route is mounted behind its rule, and a route without one stops the
app from being built (it would be open)."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Route

from chunkmq.api import router
from chunkmq.api.access import RouteWithoutRule, rule

OPEN = ("anyone", "metrics")


def _get_paths() -> list[str]:
    """The GET routes that need a token by their rule (not /healthz, nor /metrics by default)."""
    return sorted({re.sub(r"\{[^}]+\}", "x", r.path) for rt in router.routers for r in rt.routes
                   if isinstance(r, APIRoute) and "GET" in r.methods and rule("GET", r.path).who not in OPEN})


@pytest.mark.anyio
async def test_every_mounted_route_asks_for_a_token(local_api: httpx.AsyncClient) -> None:
    paths = _get_paths()
    assert len(paths) > 10 and "/healthz" not in paths
    transport = httpx.ASGITransport(app=local_api.app)  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as anonymous:
        for path in paths:
            r = await anonymous.get(path)
            assert (r.status_code, r.json().get("error", {}).get("code")) == (401, "unauthorized"), (path, r.text)
    # and with the admin token the same routes are reached (not refused by something else)
    for path in paths:
        assert (await local_api.get(path.removeprefix("/api/v1"))).status_code != 401, path


def test_a_route_without_a_rule_is_not_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = APIRouter()

    @extra.get("/api/v1/forgotten")
    def forgotten() -> dict[str, str]:
        return {}

    monkeypatch.setattr(router, "routers", (*router.routers, extra))
    app = FastAPI()
    with pytest.raises(RouteWithoutRule, match="GET /api/v1/forgotten"):
        router.install(app)


def test_only_fastapi_routes_are_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = APIRouter()
    plain.routes.append(Route("/api/v1/plain", lambda request: None))
    monkeypatch.setattr(router, "routers", (plain,))
    with pytest.raises(RouteWithoutRule, match="only FastAPI routes"):
        router.install(FastAPI())
