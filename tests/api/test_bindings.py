"""The binding routes (app/api/bindings.py) in process: create (idempotent), list and filter, delete,
the permission rule (write on the queue, read on the exchange) and the error codes."""

from __future__ import annotations

import httpx
import pytest

from chunkmq.wire import codes

pytestmark = pytest.mark.anyio


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_create_list_and_delete(local_api: httpx.AsyncClient) -> None:
    await local_api.put("/exchanges/ex", json={"type": "direct"})
    for name in ("a", "b"):
        await local_api.put(f"/queues/{name}")
    body = {"exchange": "ex", "queue": "a", "routing_key": "k"}
    first = await local_api.post("/bindings", json=body)
    assert first.status_code == 201
    assert first.json() == {"id": first.json()["id"], "exchange": "ex", "queue": "a", "routing_key": "k",
                            "arguments": {}}
    again = await local_api.post("/bindings", json=body)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    await local_api.post("/bindings", json={"exchange": "ex", "queue": "b", "routing_key": "k"})
    assert [b["queue"] for b in (await local_api.get("/bindings", params={"exchange": "ex"})).json()] == ["a", "b"]
    assert [b["queue"] for b in (await local_api.get("/bindings", params={"queue": "b"})).json()] == ["b"]
    assert (await local_api.delete(f"/bindings/{first.json()['id']}")).status_code == 204
    assert _code(await local_api.delete(f"/bindings/{first.json()['id']}")) == (404, codes.BINDING_NOT_FOUND)


async def test_errors_and_the_permission_rule(local_api: httpx.AsyncClient) -> None:
    await local_api.put("/exchanges/ex", json={"type": "direct"})
    await local_api.put("/queues/a")
    assert _code(await local_api.post("/bindings", json={"exchange": "nope", "queue": "a"})) == (
        404, codes.EXCHANGE_NOT_FOUND)
    assert _code(await local_api.post("/bindings", json={"exchange": "ex", "queue": "nope"})) == (
        404, codes.QUEUE_NOT_FOUND)
    assert _code(await local_api.post("/bindings", json={"exchange": "ex", "queue": "a", "x": 1})) == (
        400, codes.INVALID_BODY)
    assert _code(await local_api.delete("/bindings/abc")) == (400, codes.INVALID_REQUEST)
    meta = local_api.app.state.broker.meta  # type: ignore[attr-defined]
    _, plain = meta.create_token("writer", write="^a$", read="")  # may write a, may not read ex
    refused = await local_api.post("/bindings", json={"exchange": "ex", "queue": "a"},
                                   headers={"authorization": f"Bearer {plain}"})
    assert _code(refused) == (403, codes.FORBIDDEN) and "read on the exchange" in refused.json()["error"]["message"]
