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


async def test_the_list_pages_by_name_with_a_next_link(local_api: httpx.AsyncClient) -> None:
    names = ["a1", "a2", "b1", "b2", "b3", "c1"]
    for name in reversed(names):
        assert (await local_api.put(f"/queues/{name}")).status_code == 201
    assert [q["name"] for q in (await local_api.get("/queues")).json()] == names  # no paging: every queue
    first = await local_api.get("/queues", params={"limit": 4})
    assert [q["name"] for q in first.json()] == names[:4] and first.json()[0]["groups"] == []
    assert first.headers["link"] == '</api/v1/queues?limit=4&after=b2>; rel="next"'
    last = await local_api.get("/queues", params={"limit": 4, "after": "b2"})
    assert [q["name"] for q in last.json()] == ["b3", "c1"] and "link" not in last.headers
    exact = await local_api.get("/queues", params={"limit": 2, "after": "b3"})
    assert [q["name"] for q in exact.json()] == ["c1"] and "link" not in exact.headers
    gone = await local_api.get("/queues", params={"after": "a15"})  # no such queue: the names after it
    assert [q["name"] for q in gone.json()] == names[1:] and "link" not in gone.headers
    assert (await local_api.get("/queues", params={"after": "c1"})).json() == []
    assert (await local_api.delete("/queues/b1")).status_code == 204
    assert (await local_api.put("/queues/b0")).status_code == 201  # the kept order follows declares and deletes
    page = await local_api.get("/queues", params={"limit": 3, "after": "a2"})
    assert [q["name"] for q in page.json()] == ["b0", "b2", "b3"]


async def test_a_page_shows_what_the_token_may_see(local_api: httpx.AsyncClient) -> None:
    for name in ("a", "b1", "b2", "c", "d", "b3"):
        await local_api.put(f"/queues/{name}")
    meta = local_api.app.state.meta  # type: ignore[attr-defined]
    plain = meta.create_token("bees", read="b.*")[1]
    headers = {"authorization": f"Bearer {plain}"}
    first = await local_api.get("/queues", params={"limit": 2}, headers=headers)
    assert [q["name"] for q in first.json()] == ["b1", "b2"] and 'after=b2' in first.headers["link"]
    rest = await local_api.get("/queues", params={"limit": 2, "after": "b2"}, headers=headers)
    assert [q["name"] for q in rest.json()] == ["b3"] and "link" not in rest.headers


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "ten"}, {"after": ""},
                                    {"after": "x" * 256}])
async def test_bad_paging_is_refused(local_api: httpx.AsyncClient, params: dict[str, str]) -> None:
    answer = await local_api.get("/queues", params=params)
    assert _code(answer) == (400, codes.INVALID_REQUEST)
    assert answer.json()["error"]["message"]
