"""The pull route (app/api/pull.py) in process: a pull creates the group and delivers, the ack riding
on the next pull applies before it, the binary batch on Accept, and each bad field named with its
code."""

from __future__ import annotations

import httpx
import pytest

from chunkmq.wire import codes
from chunkmq.wire.batch import MEDIA_TYPE, decode_delivered

pytestmark = pytest.mark.anyio


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def _queue(api: httpx.AsyncClient, count: int) -> None:
    await api.put("/queues/q")
    await api.post("/queues/q/publish", json={"messages": [{"body": f"m{i}"} for i in range(count)]})


async def test_pull_delivers_and_the_ack_rides_on_the_next_pull(local_api: httpx.AsyncClient) -> None:
    await _queue(local_api, 5)
    first = await local_api.post("/queues/q/groups/g/pull", json={"max_messages": 2})
    assert [m["body"] for m in first.json()["messages"]] == ["m0", "m1"]
    second = await local_api.post("/queues/q/groups/g/pull", json={"max_messages": 2, "ack": {"up_to": 2}})
    assert [m["offset"] for m in second.json()["messages"]] == [2, 3]
    assert (await local_api.get("/queues/q/groups/g")).json()["ack_floor"] == 2
    empty = await local_api.post("/queues/q/groups/other/pull", json={"wait_ms": 10, "consumer": "c-1"})
    assert len(empty.json()["messages"]) == 5  # a new group starts at earliest


async def test_a_binary_batch_on_accept(local_api: httpx.AsyncClient) -> None:
    await _queue(local_api, 3)
    answer = await local_api.post("/queues/q/groups/g/pull", json={}, headers={"accept": MEDIA_TYPE})
    assert answer.headers["content-type"].startswith(MEDIA_TYPE)
    batch = decode_delivered(answer.content)
    assert list(batch.offsets) == [0, 1, 2]


async def test_each_bad_field_is_refused(local_api: httpx.AsyncClient) -> None:
    await _queue(local_api, 1)
    await local_api.post("/queues/q/groups/g/pull", json={})
    for body, code in (
        ({"max_messages": 0}, codes.INVALID_BODY), ({"max_messages": 1001}, codes.INVALID_BODY),
        ({"wait_ms": -1}, codes.INVALID_BODY), ({"wait_ms": 30_001}, codes.INVALID_BODY),
        ({"consumer": "a/b"}, codes.INVALID_NAME), ({"bogus": 1}, codes.INVALID_BODY),
        ({"ack": [1]}, codes.INVALID_BODY), ({"ack": {"up_to": 99}}, codes.INVALID_ACK),
    ):
        assert _code(await local_api.post("/queues/q/groups/g/pull", json=body)) == (400, code), body
    assert _code(await local_api.post("/queues/nope/groups/g/pull", json={})) == (404, codes.QUEUE_NOT_FOUND)
