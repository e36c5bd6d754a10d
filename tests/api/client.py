"""Tiny helpers over httpx for the API tests (each asserts the status it expects)."""

from __future__ import annotations

from typing import Any

import httpx


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.status_code} {response.text}"
    return response.json() if response.content else None


def error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, f"{response.status_code} {response.text}"
    body = response.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return str(body["error"]["message"])


def queue(api: httpx.Client, name: str, **settings: Any) -> dict[str, Any]:
    response = api.put(f"/api/v1/queues/{name}", json=settings)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def exchange(api: httpx.Client, name: str, type: str, **extra: Any) -> dict[str, Any]:
    response = api.put(f"/api/v1/exchanges/{name}", json={"type": type, **extra})
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def bind(api: httpx.Client, exchange: str, queue: str, routing_key: str = "", **arguments: str) -> dict[str, Any]:
    body = {"exchange": exchange, "queue": queue, "routing_key": routing_key, "arguments": arguments}
    response = api.post("/api/v1/bindings", json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def publish(api: httpx.Client, exchange: str, *messages: dict[str, Any], mandatory: bool = False) -> Any:
    body = {"messages": list(messages), "mandatory": mandatory}
    return ok(api.post(f"/api/v1/exchanges/{exchange}/publish", json=body))


def browse(api: httpx.Client, queue: str, offset: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    page = ok(api.get(f"/api/v1/queues/{queue}/messages", params={"offset": offset, "limit": limit}))
    return list(page["messages"])


def bodies(api: httpx.Client, queue: str) -> list[str]:
    return [m.get("body") for m in browse(api, queue)]
