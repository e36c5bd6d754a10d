"""The queue routes (app/api/queues.py) in process: declare, redeclare, read, change, browse, purge and
delete, and each error answered in API.md's shape with its code."""

from __future__ import annotations

import httpx
import pytest

from chunkmq.wire import codes

pytestmark = pytest.mark.anyio


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_declare_read_change_and_delete(local_api: httpx.AsyncClient) -> None:
    created = await local_api.put("/queues/orders", json={"max_messages": 10})
    assert created.status_code == 201 and created.json()["name"] == "orders"
    assert created.json()["max_messages"] == 10  # settings are top-level fields
    assert (await local_api.put("/queues/orders", json={"max_messages": 10})).status_code == 200  # the same
    assert _code(await local_api.put("/queues/orders", json={"max_messages": 11})) == (409, codes.PRECONDITION_FAILED)
    assert (await local_api.put("/queues/bare")).status_code == 201  # no body: the defaults
    changed = await local_api.patch("/queues/orders", json={"max_messages": 20})
    assert changed.status_code == 200 and changed.json()["max_messages"] == 20
    assert [q["name"] for q in (await local_api.get("/queues")).json()] == ["bare", "orders"]
    assert (await local_api.get("/queues/orders")).json()["messages"] == 0
    assert (await local_api.delete("/queues/orders")).status_code == 204
    assert _code(await local_api.get("/queues/orders")) == (404, codes.QUEUE_NOT_FOUND)


async def test_browse_purge_and_delete_with_messages(local_api: httpx.AsyncClient) -> None:
    await local_api.put("/queues/q")
    published = await local_api.post("/queues/q/publish", json={"messages": [{"body": f"m{i}"} for i in range(5)]})
    assert published.status_code == 200
    page = (await local_api.get("/queues/q/messages", params={"offset": 2, "limit": 2})).json()
    assert [m["body"] for m in page["messages"]] == ["m2", "m3"] and page["next_offset"] == 4
    encoded = (await local_api.get("/queues/q/messages", params={"limit": 1, "encoding": "base64"})).json()
    assert encoded["messages"][0]["body_base64"] == "bTA="
    await local_api.put("/queues/q/groups/g")
    assert _code(await local_api.delete("/queues/q")) == (409, codes.PRECONDITION_FAILED)  # the group has lag
    assert (await local_api.post("/queues/q/purge")).json() == {"purged": 5}
    assert (await local_api.get("/queues/q")).json()["messages"] == 0
    assert (await local_api.delete("/queues/q", params={"force": "true"})).status_code == 204


async def test_errors_carry_their_codes(local_api: httpx.AsyncClient) -> None:
    assert _code(await local_api.put("/queues/amq.mine")) == (400, codes.INVALID_NAME)
    assert _code(await local_api.put("/queues/q", json={"max_messages": 0})) == (400, codes.INVALID_BODY)
    assert _code(await local_api.put("/queues/q", json={"bogus": 1})) == (400, codes.INVALID_BODY)
    assert _code(await local_api.put("/queues/q", content=b"{not json")) == (400, codes.INVALID_BODY)
    assert _code(await local_api.get("/queues/nope/messages")) == (404, codes.QUEUE_NOT_FOUND)
    assert _code(await local_api.post("/queues/nope/purge")) == (404, codes.QUEUE_NOT_FOUND)
    await local_api.put("/queues/q")
    assert _code(await local_api.get("/queues/q/messages", params={"limit": 0})) == (400, codes.INVALID_REQUEST)
    assert _code(await local_api.patch("/queues/nope", json={})) == (404, codes.QUEUE_NOT_FOUND)
