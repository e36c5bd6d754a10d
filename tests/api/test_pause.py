"""Pausing a group: the routes in process, then a real server with a WebSocket consumer that stays
connected while paused, and a pause that survives a restart and a kill -9."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from chunkmq.broker.group import now_ms
from tests.api.client import ok
from tests.api.test_streams import consume_url, fill, group_info, messages_until_quiet, open_ws, recv, send
from tests.server import ServerProcess


@pytest.mark.anyio
async def test_pause_and_resume_routes_answer_the_group_and_refuse_bad_bodies(local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/queues/q", json={}), 201)
    ok(await local_api.post("/queues/q/publish", json={"messages": [{"body": "a"}, {"body": "b"}]}))
    ok(await local_api.put("/queues/q/groups/g", json={}), 201)
    group = ok(await local_api.post("/queues/q/groups/g/pause"))
    assert (group["paused"], group["paused_until_ms"]) == (True, None)
    pull = {"max_messages": 10, "wait_ms": 0, "consumer": "c1"}
    assert ok(await local_api.post("/queues/q/groups/g/pull", json=pull))["messages"] == []
    until = now_ms() + 60_000
    group = ok(await local_api.post("/queues/q/groups/g/pause", json={"until_ms": until}))
    assert (group["paused"], group["paused_until_ms"]) == (True, until)
    assert ok(await local_api.get("/queues/q"))["groups"][0]["paused_until_ms"] == until
    for bad in ({"until_ms": 5}, {"until_ms": "soon"}, {"until": until}, {"until_ms": 1.5}):
        answer = await local_api.post("/queues/q/groups/g/pause", json=bad)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_body", bad
        assert "until" in answer.json()["error"]["message"]
    assert (await local_api.post("/queues/q/groups/g/resume", json={"x": 1})).status_code == 400
    assert (await local_api.post("/queues/q/groups/nope/pause")).json()["error"]["code"] == "group_not_found"
    assert (await local_api.post("/queues/nope/groups/g/resume")).json()["error"]["code"] == "queue_not_found"
    group = ok(await local_api.post("/queues/q/groups/g/resume"))
    assert (group["paused"], group["paused_until_ms"]) == (False, None)
    assert len(ok(await local_api.post("/queues/q/groups/g/pull", json=pull))["messages"]) == 2


def test_a_websocket_consumer_stays_connected_while_paused_and_receives_after_resume(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        fill(server, "q", 0)
        base = f"{server.url}/api/v1/queues/q/groups/g"
        ok(httpx.put(base, json={}), 201)
        ok(httpx.post(f"{base}/pause", json={}))

        async def consume() -> None:
            async with open_ws(consume_url(server, "q", consumer="w1")) as ws:
                await send(ws, type="credit", n=100)
                publish = {"messages": [{"body": str(i), "routing_key": "q"} for i in range(5)]}
                ok(httpx.post(f"{server.url}/api/v1/exchanges/amq.default/publish", json=publish))
                assert await messages_until_quiet(ws, 0.5) == []  # paused: nothing, and still open
                await send(ws, type="ping")
                assert (await recv(ws))["type"] == "pong"
                assert [c["id"] for c in group_info(server, "q")["consumers"]] == ["w1"]
                ok(httpx.post(f"{base}/resume"))
                got = await messages_until_quiet(ws, 0.5)
                assert [m["body"] for m in got] == [str(i) for i in range(5)]
                until = now_ms() + 500
                ok(httpx.post(f"{base}/pause", json={"until_ms": until}))
                ok(httpx.post(f"{server.url}/api/v1/exchanges/amq.default/publish",
                              json={"messages": [{"body": "later", "routing_key": "q"}]}))
                frame = await recv(ws, 5)  # the timed pause ends by itself
                assert [m["body"] for m in frame["messages"]] == ["later"]
                assert 0 <= now_ms() - until < 2000

        asyncio.run(asyncio.wait_for(consume(), 60))
    finally:
        server.stop()


@pytest.mark.parametrize("how", ["restart", "kill -9"])
def test_a_paused_group_stays_paused_across_a_restart_and_a_kill_9(tmp_path: Path, how: str) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        fill(server, "q", 3)
        base = f"{server.url}/api/v1/queues/q/groups"
        ok(httpx.put(f"{base}/g", json={}), 201)
        ok(httpx.put(f"{base}/timed", json={}), 201)
        ok(httpx.post(f"{base}/g/pause"))
        until = now_ms() + 10_000  # beyond the restart even on a loaded machine
        ok(httpx.post(f"{base}/timed/pause", json={"until_ms": until}))
        if how == "restart":
            server.restart()
        else:
            server.kill()  # at once after the answers: nothing may be written behind
            server.start()
        base = f"{server.url}/api/v1/queues/q/groups"
        pull = {"max_messages": 10, "wait_ms": 0, "consumer": "c"}
        assert ok(httpx.get(f"{base}/g"))["paused"] is True
        assert ok(httpx.get(f"{base}/timed"))["paused_until_ms"] == until
        assert ok(httpx.post(f"{base}/g/pull", json=pull))["messages"] == []
        assert ok(httpx.post(f"{base}/timed/pull", json=pull))["messages"] == []
        waited = ok(httpx.post(f"{base}/timed/pull", json={**pull, "wait_ms": 20_000}, timeout=30))["messages"]
        assert len(waited) == 3 and now_ms() >= until
        ok(httpx.post(f"{base}/g/resume"))
        assert len(ok(httpx.post(f"{base}/g/pull", json=pull))["messages"]) == 3
    finally:
        server.stop()
