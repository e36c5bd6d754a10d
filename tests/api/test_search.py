"""POST /api/v1/queues/{name}/search: in process over httpx.ASGITransport (answers, paging by cursor,
strict bodies, the read permission) and against a real uvicorn server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from chunkmq.wire import codes
from tests.api.client import error, ok, queue

MESSAGES: list[dict[str, Any]] = [
    {"body": f"order {i} {'eu' if i % 3 == 0 else 'us'}", "routing_key": f"orders.{'eu' if i % 3 == 0 else 'us'}",
     "headers": {"n": str(i)}, "tag": "created" if i % 2 == 0 else "paid"}
    for i in range(30)
]


@pytest.mark.anyio
async def test_a_search_answers_messages_as_browse_does_and_pages_by_cursor(local_api: httpx.AsyncClient) -> None:
    assert (await local_api.put("/queues/q")).status_code == 201
    assert (await local_api.post("/queues/q/publish", json={"messages": MESSAGES})).status_code == 200
    r = await local_api.post("/queues/q/search", json={"routing_key": "orders.eu", "tag": "created", "limit": 2})
    page = r.json()
    assert r.status_code == 200, r.text
    browse = (await local_api.get("/queues/q/messages", params={"offset": 0, "limit": 1})).json()["messages"][0]
    assert page["messages"][0] == browse  # the same message object as browse answers
    assert [m["offset"] for m in page["messages"]] == [0, 6]
    assert page["stopped"] == "limit" and page["next_offset"] == 7 and page["scanned"] == 7
    assert isinstance(page["elapsed_ms"], float) and page["cursor"]
    found = [m["offset"] for m in page["messages"]]
    while page["cursor"]:
        page = (await local_api.post("/queues/q/search", json={"cursor": page["cursor"], "limit": 2})).json()
        found += [m["offset"] for m in page["messages"]]
    assert found == [i for i in range(30) if i % 6 == 0] and page["stopped"] == "end"
    r = await local_api.post("/queues/q/search", json={"body_regex": "^order 2[0-9] us$", "header_exists": ["n"]})
    assert [m["offset"] for m in r.json()["messages"]] == [20, 22, 23, 25, 26, 28, 29]


@pytest.mark.anyio
@pytest.mark.parametrize(("body", "field"), [
    ({"body_regex": "(?<=x)y"}, "body_regex"),
    ({"limit": 0}, "limit"),
    ({"bogus": True}, "bogus"),
    ({"cursor": "garbage"}, "cursor"),
])
async def test_bad_bodies_are_400_invalid_body_naming_the_field(local_api: httpx.AsyncClient, body: dict[str, Any],
                                                                field: str) -> None:
    await local_api.put("/queues/q")
    r = await local_api.post("/queues/q/search", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == codes.INVALID_BODY, r.text
    assert field in r.json()["error"]["message"]


@pytest.mark.anyio
async def test_not_found_not_json_and_the_read_permission(local_api: httpx.AsyncClient) -> None:
    r = await local_api.post("/queues/nope/search", json={})
    assert (r.status_code, r.json()["error"]["code"]) == (404, codes.QUEUE_NOT_FOUND)
    await local_api.put("/queues/q")
    r = await local_api.post("/queues/q/search", content=b"[1]", headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, codes.INVALID_BODY)
    meta = local_api.app.state.broker.meta  # type: ignore[attr-defined]
    _, writer = meta.create_token("writer", write="^q$")
    _, reader = meta.create_token("reader", read="^q$")
    refused = await local_api.post("/queues/q/search", json={}, headers={"authorization": f"Bearer {writer}"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, codes.FORBIDDEN)
    allowed = await local_api.post("/queues/q/search", json={}, headers={"authorization": f"Bearer {reader}"})
    assert allowed.status_code == 200 and allowed.json()["messages"] == []


def test_a_real_server_searches(api: httpx.Client, name: str) -> None:
    queue(api, name)
    ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": [
        *MESSAGES, {"body_base64": "AAFuZWVkbGX/", "idempotency_key": "k-1"}]}))
    page = ok(api.post(f"/api/v1/queues/{name}/search", json={"body_contains_base64": "bmVlZGxl"}))
    assert [m["offset"] for m in page["messages"]] == [30] and page["messages"][0]["body_base64"] == "AAFuZWVkbGX/"
    page = ok(api.post(f"/api/v1/queues/{name}/search", json={"idempotency_key": "k-1"}))
    assert [m["offset"] for m in page["messages"]] == [30] and page["cursor"] is None
    one = page["messages"][0]["id"]
    page = ok(api.post(f"/api/v1/queues/{name}/search", json={"message_id": one}))
    assert [m["id"] for m in page["messages"]] == [one] and page["scanned"] == 1
    page = ok(api.post(f"/api/v1/queues/{name}/search", json={"body_contains": "ORDER 1", "ignore_case": True,
                                                              "max_scan": 10}))
    assert [m["offset"] for m in page["messages"]] == [1] and page["stopped"] == "max_scan" and page["cursor"]
    error(api.post(f"/api/v1/queues/{name}/search", json={"body_regex": "a**"}), 400, "invalid_body")
    orders = [{"body": f'{{"order": {{"total": {t}}}, "customer": "c-{t % 7}"}}'} for t in (50, 101, 150, 250)]
    ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": orders}))
    page = ok(api.post(f"/api/v1/queues/{name}/search", json={"json_path": ["$.order.total > 100",
                                                                            '$.customer != "c-3"']}))
    assert [m["offset"] for m in page["messages"]] == [34]  # over 100: 101, 150 and 250; only 250 is not c-3
