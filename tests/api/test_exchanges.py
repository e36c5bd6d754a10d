"""The exchange routes (app/api/exchanges.py) in process: declare, read, list, delete (if unused),
the default exchange as amq.default, and the error codes."""

from __future__ import annotations

import httpx
import pytest

from chunkmq.wire import codes

pytestmark = pytest.mark.anyio


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_declare_read_list_and_delete(local_api: httpx.AsyncClient) -> None:
    created = await local_api.put("/exchanges/orders", json={"type": "topic"})
    assert created.status_code == 201 and created.json()["type"] == "topic"
    assert (await local_api.put("/exchanges/orders", json={"type": "topic"})).status_code == 200
    assert _code(await local_api.put("/exchanges/orders", json={"type": "fanout"})) == (409, codes.PRECONDITION_FAILED)
    names = [e["name"] for e in (await local_api.get("/exchanges")).json()]
    assert "orders" in names
    assert (await local_api.get("/exchanges/amq.default")).json()["type"] == "direct"
    await local_api.put("/queues/q")
    bound = await local_api.post("/bindings", json={"exchange": "orders", "queue": "q", "routing_key": "#"})
    assert bound.status_code == 201
    assert _code(await local_api.delete("/exchanges/orders", params={"if_unused": "true"})) == (
        409, codes.PRECONDITION_FAILED)
    assert (await local_api.delete("/exchanges/orders")).status_code == 204
    assert _code(await local_api.get("/exchanges/orders")) == (404, codes.EXCHANGE_NOT_FOUND)


async def test_errors_carry_their_codes(local_api: httpx.AsyncClient) -> None:
    assert _code(await local_api.put("/exchanges/amq.x", json={"type": "direct"})) == (400, codes.INVALID_NAME)
    assert _code(await local_api.put("/exchanges/x", json={"type": "nope"})) == (400, codes.INVALID_BODY)
    assert _code(await local_api.put("/exchanges/x", json={})) == (400, codes.INVALID_BODY)
    assert _code(await local_api.delete("/exchanges/nope")) == (404, codes.EXCHANGE_NOT_FOUND)
