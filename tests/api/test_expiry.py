"""Message expiry over the API: the routes in process (validation, the queue and group objects), then
real servers: a WebSocket publish and an exchange publish with a short ttl, the dead-letter queue
that receives them with reason `expired`, /metrics, and expiry across a kill -9."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from chunkmq.broker.expiry import MAX_TTL_MS, MAX_TTL_SECONDS
from tests.api.client import error, ok
from tests.api.test_streams import consume_url, messages_until_quiet, open_ws, publish_url, recv, run, send
from tests.server import ServerProcess

PULL = {"max_messages": 100, "wait_ms": 0, "consumer": "c"}


@pytest.mark.anyio
async def test_ttls_are_validated_and_the_queue_counts_what_expired(local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/queues/q", json={"message_ttl_seconds": 3600}), 201)
    assert ok(await local_api.get("/queues/q"))["message_ttl_seconds"] == 3600
    for bad in (0, MAX_TTL_SECONDS + 1, "60", 1.5, True):
        message = error(await local_api.patch("/queues/q", json={"message_ttl_seconds": bad}), 400, "invalid_body")
        assert "message_ttl_seconds" in message
    for path in ("/queues/q/publish", "/exchanges/amq.default/publish"):
        for bad in (0, -5, MAX_TTL_MS + 1, "10", 2.5, False):
            body = {"messages": [{"body": "x", "routing_key": "q"}, {"body": "y", "routing_key": "q", "ttl_ms": bad}]}
            assert "messages[1].ttl_ms" in error(await local_api.post(path, json=body), 400, "invalid_body")
    assert ok(await local_api.get("/queues/q"))["messages"] == 0  # nothing of a refused batch stored
    ok(await local_api.post("/queues/q/publish", json={"messages": [{"body": "gone", "ttl_ms": 1}]}))
    ok(await local_api.post("/exchanges/amq.default/publish",
                            json={"messages": [{"body": "kept", "routing_key": "q", "ttl_ms": MAX_TTL_MS}]}))
    time.sleep(0.01)
    got = ok(await local_api.post("/queues/q/groups/g/pull", json=PULL))["messages"]
    assert [m["body"] for m in got] == ["kept"] and "x-expires-at" in got[0]["headers"]
    queue = ok(await local_api.get("/queues/q"))
    assert (queue["expired"], queue["groups"][0]["expired"], queue["messages_dropped"]) == (1, 1, 0)
    assert queue["groups"][0]["ack_floor"] == 1  # the expired one is done, the other in flight
    overview = ok(await local_api.get("/overview"))
    assert overview["counters"]["expired"] == 1


def _dead_letter_setup(api: httpx.Client, queue: str) -> None:
    ok(api.put("/exchanges/dlx", json={"type": "fanout"}), 201)
    ok(api.put("/queues/dead", json={}), 201)
    ok(api.post("/bindings", json={"exchange": "dlx", "queue": "dead"}), 201)
    ok(api.put(f"/queues/{queue}", json={"dead_letter_exchange": "dlx"}), 201)


def test_a_real_server_dead_letters_what_expired_with_reason_expired(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as api:
            _dead_letter_setup(api, "src")
            ok(api.put("/exchanges/ex", json={"type": "direct"}), 201)
            ok(api.post("/bindings", json={"exchange": "ex", "queue": "src", "routing_key": "k"}), 201)
            ok(api.post("/exchanges/ex/publish", json={"messages": [{"body": "rest", "routing_key": "k",
                                                                     "ttl_ms": 200}]}))

            async def over_websocket() -> None:
                async with open_ws(publish_url(server)) as ws:
                    await send(ws, type="publish", seq=1,
                               messages=[{"body": "ws", "routing_key": "src", "ttl_ms": 200}])
                    assert (await recv(ws))["type"] == "confirm"
                    await send(ws, type="publish", seq=2, messages=[{"body": "x", "routing_key": "src", "ttl_ms": 0}])
                    answer = await recv(ws)
                    assert answer["error"]["code"] == "invalid_body" and "ttl_ms" in answer["error"]["message"]

            run(over_websocket())
            ok(api.put("/queues/src/groups/g", json={}), 201)
            time.sleep(0.4)
            assert ok(api.post("/queues/src/groups/g/pull", json={**PULL, "wait_ms": 300}))["messages"] == []
            dead = ok(api.post("/queues/dead/groups/d/pull", json=PULL))["messages"]
            assert sorted(m["body"] for m in dead) == ["rest", "ws"]
            assert {m["headers"]["x-death-reason"] for m in dead} == {"expired"}
            queue = ok(api.get("/queues/src"))
            assert (queue["expired"], queue["dead_lettered"], queue["groups"][0]["ack_floor"]) == (2, 2, 2)
            ok(api.post("/queues/src/publish", json={"messages": [{"body": "late", "ttl_ms": 1}, {"body": "ok"}]}))
            time.sleep(0.05)

            async def stream() -> None:  # a WebSocket consumer of a new group gets only what has not expired
                async with open_ws(consume_url(server, "src", "w")) as ws:
                    await send(ws, type="credit", n=100)
                    got = await messages_until_quiet(ws, 0.5)
                    assert [m["body"] for m in got] == ["ok"]

            run(stream())
            assert ok(api.get("/queues/src/groups/w"))["expired"] == 3  # the two above and "late"
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'chunkmq_queue_messages_expired_total{queue="src"} 5.0' in metrics
        assert "chunkmq_messages_expired_total 5.0" in metrics
    finally:
        server.stop()


def test_messages_about_to_expire_at_a_kill_9_are_not_delivered_after_it(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as api:
            _dead_letter_setup(api, "src")
            ok(api.put("/queues/src/groups/g", json={}), 201)
            ok(api.put("/queues/aging", json={"message_ttl_seconds": 1}), 201)
            ok(api.put("/queues/aging/groups/g", json={}), 201)
            short = [{"body": f"s{i}", "ttl_ms": 1500} for i in range(5)]
            ok(api.post("/queues/src/publish", json={"messages": [*short, {"body": "stays"}]}))
            ok(api.post("/queues/aging/publish", json={"messages": [{"body": "a"}, {"body": "b"}]}))
        server.kill()  # at once after the answers
        time.sleep(1.6)
        server.start()
        with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as api:
            assert [m["body"] for m in ok(api.post("/queues/src/groups/g/pull", json=PULL))["messages"]] == ["stays"]
            assert ok(api.post("/queues/aging/groups/g/pull", json=PULL))["messages"] == []
            assert ok(api.get("/queues/src"))["expired"] == 5 and ok(api.get("/queues/aging"))["expired"] == 2
            dead = ok(api.post("/queues/dead/groups/d/pull", json=PULL))["messages"]
            assert sorted(m["body"] for m in dead) == [f"s{i}" for i in range(5)]
            assert ok(api.get("/queues/aging/groups/g"))["lag"] == 0
    finally:
        server.stop()
