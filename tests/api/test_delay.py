"""Delayed delivery: the routes in process, then real servers (order and lateness, kill -9)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from chunkmq.broker.group import now_ms
from chunkmq.broker.scheduling import MAX_DELAY_MS
from tests.api.client import ok
from tests.server import ServerProcess

PULL = {"max_messages": 100, "wait_ms": 0, "consumer": "c1"}


async def _pull_until(api: httpx.AsyncClient, path: str, n: int, timeout: float = 5.0) -> list[dict[str, object]]:
    got: list[dict[str, object]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += ok(await api.post(path, json={**PULL, "wait_ms": 200}))["messages"]
    return got


@pytest.mark.anyio
async def test_a_delayed_message_waits_for_its_time_and_does_not_hold_back_later_ones(
        local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/queues/q", json={}), 201)
    ok(await local_api.put("/queues/q/groups/g", json={}), 201)
    results = ok(await local_api.post("/queues/q/publish", json={"messages": [
        {"body": "late", "delay_ms": 600, "tag": "t", "headers": {"h": "v"}}]}))["results"]
    assert results[0]["routed"] == [{"queue": "q", "offset": None}] and results[0]["deliver_at_ms"] > now_ms()
    ok(await local_api.post("/queues/q/publish", json={"messages": [{"body": "now"}]}))
    queue = ok(await local_api.get("/queues/q"))
    assert queue["scheduled"] == 1 and queue["next_due_ms"] == results[0]["deliver_at_ms"]
    metrics = (await local_api.get("http://local/metrics")).text
    assert 'chunkmq_queue_messages_scheduled{queue="q"} 1.0' in metrics
    pulled = ok(await local_api.post("/queues/q/groups/g/pull", json=PULL))["messages"]
    assert [m["body"] for m in pulled] == ["now"]
    ok(await local_api.post("/queues/q/groups/g/ack", json={"up_to": pulled[0]["offset"] + 1}))
    late = await _pull_until(local_api, "/queues/q/groups/g/pull", 1)
    assert [(m["body"], m["tag"], m["headers"]) for m in late] == [("late", "t", {"h": "v"})]
    assert now_ms() >= results[0]["deliver_at_ms"]
    assert ok(await local_api.get("/queues/q"))["scheduled"] == 0
    assert 'chunkmq_queue_messages_scheduled{queue="q"} 0.0' in (await local_api.get("http://local/metrics")).text


@pytest.mark.anyio
async def test_a_delayed_message_keeps_its_ttl_from_its_publish(local_api: httpx.AsyncClient) -> None:
    """Delay and expiry together: the ttl counts from the publish, so a message due after its
    expiry is passed as expired when due, and one that expires later is delivered."""
    ok(await local_api.put("/queues/q", json={}), 201)
    ok(await local_api.put("/queues/q/groups/g", json={}), 201)
    ok(await local_api.post("/queues/q/publish", json={"messages": [
        {"body": "gone", "delay_ms": 300, "ttl_ms": 100}, {"body": "kept", "delay_ms": 300, "ttl_ms": 60_000}]}))
    got = await _pull_until(local_api, "/queues/q/groups/g/pull", 1)
    assert [m["body"] for m in got] == ["kept"]
    group = ok(await local_api.get("/queues/q/groups/g"))
    assert group["expired"] == 1 and group["lag"] == 1  # "kept" delivered, not acked


@pytest.mark.anyio
async def test_deliver_at_through_an_exchange_reaches_every_bound_queue(local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/exchanges/fan", json={"type": "fanout"}), 201)
    for name in ("a", "b"):
        ok(await local_api.put(f"/queues/{name}", json={}), 201)
        ok(await local_api.post("/bindings", json={"exchange": "fan", "queue": name}), 201)
    at = now_ms() + 300
    result = ok(await local_api.post("/exchanges/fan/publish", json={"messages": [
        {"body": "x", "deliver_at_ms": at}]}))["results"][0]
    assert sorted(r["queue"] for r in result["routed"]) == ["a", "b"]
    for name in ("a", "b"):
        got = await _pull_until(local_api, f"/queues/{name}/groups/g/pull", 1)
        assert [m["body"] for m in got] == ["x"]


@pytest.mark.anyio
async def test_bad_delays_are_refused_naming_the_field(local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/queues/q", json={}), 201)
    for bad, field in (({"delay_ms": -1}, "delay_ms"), ({"delay_ms": "1"}, "delay_ms"),
                       ({"delay_ms": 1.5}, "delay_ms"), ({"delay_ms": MAX_DELAY_MS + 1}, "delay_ms"),
                       ({"delay_ms": True}, "delay_ms"),
                       ({"deliver_at_ms": now_ms() + MAX_DELAY_MS + 60_000}, "deliver_at_ms"),
                       ({"deliver_at_ms": -5}, "deliver_at_ms"),
                       ({"delay_ms": 1, "deliver_at_ms": 1}, "deliver_at_ms"),
                       ({"delay_ms": 1, "idempotency_key": "k"}, "idempotency_key")):
        answer = await local_api.post("/queues/q/publish", json={"messages": [{"body": "b", **bad}]})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_body", bad
        assert field in answer.json()["error"]["message"], bad
    assert ok(await local_api.get("/queues/q"))["scheduled"] == 0


def _pull(server: ServerProcess, queue: str, wait_ms: int = 200) -> list[dict[str, object]]:
    answer = httpx.post(f"{server.url}/api/v1/queues/{queue}/groups/g/pull",
                        json={"max_messages": 1000, "wait_ms": wait_ms, "consumer": "c"}, timeout=30)
    messages: list[dict[str, object]] = ok(answer)["messages"]
    if messages:
        ok(httpx.post(f"{server.url}/api/v1/queues/{queue}/groups/g/ack",
                      json={"offsets": [m["offset"] for m in messages]}))
    return messages


def test_a_real_server_delivers_undelayed_first_and_delayed_on_time(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        api = f"{server.url}/api/v1"
        ok(httpx.put(f"{api}/queues/q", json={}), 201)
        ok(httpx.put(f"{api}/queues/q/groups/g", json={}), 201)
        base = now_ms()
        delayed = [{"body": f"d{i}", "deliver_at_ms": base + 500 + 50 * i} for i in range(10)]
        ok(httpx.post(f"{api}/queues/q/publish", json={"messages": delayed}))
        ok(httpx.post(f"{api}/queues/q/publish", json={"messages": [{"body": f"u{i}"} for i in range(10)]}))
        seen: list[tuple[str, int, int]] = []  # body, received, entered the queue (the copy's timestamp)
        while len(seen) < 20 and now_ms() < base + 10_000:
            seen += [(str(m["body"]), now_ms(), int(m["timestamp"])) for m in _pull(server, "q", 1_000)]  # type: ignore[call-overload]
        assert [b for b, _, _ in seen[:10]] == [f"u{i}" for i in range(10)]
        assert [b for b, _, _ in seen[10:]] == [f"d{i}" for i in range(10)]
        for i, (_, received, entered) in enumerate(seen[10:]):
            due = base + 500 + 50 * i
            # into the queue within 100 ms of its time; received soon after (a loaded test machine)
            assert due <= entered <= due + 100 and received <= due + 500, (i, entered - due, received - due)
    finally:
        server.stop()


def test_delayed_messages_survive_a_kill_9_and_come_at_their_time(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        api = f"{server.url}/api/v1"
        ok(httpx.put(f"{api}/queues/q", json={}), 201)
        ok(httpx.put(f"{api}/queues/q/groups/g", json={}), 201)
        base = now_ms()
        # some due before the kill (delivered and acked), most due after the restart
        bodies = [f"m{i}" for i in range(300)]
        dues = [base + (200 if i < 50 else 4_000 + 10 * i) for i in range(300)]
        for start in range(0, 300, 100):
            ok(httpx.post(f"{api}/queues/q/publish", json={"messages": [
                {"body": b, "deliver_at_ms": d} for b, d in zip(bodies[start:start + 100], dues[start:start + 100],
                                                                 strict=True)]}))
        early: list[str] = []
        while len(early) < 50 and now_ms() < base + 3_000:
            early += [str(m["body"]) for m in _pull(server, "q", 100)]
        assert sorted(early) == sorted(bodies[:50])
        time.sleep(0.5)  # the acks and the schedule's watermark written behind
        server.kill()
        server.start()
        queue = ok(httpx.get(f"{api}/queues/q"))
        # each of the 250 is still scheduled, or (a slow restart) already copied in after the 50
        assert queue["scheduled"] + queue["messages"] - 50 == 250
        late: list[tuple[str, int]] = []
        while len({b for b, _ in late}) < 250 and now_ms() < base + 20_000:
            late += [(str(m["body"]), now_ms()) for m in _pull(server, "q", 100)]
        assert {b for b, _ in late} == set(bodies[50:])
        for body, at in late:
            due = dues[bodies.index(body)]
            assert at >= due, body
    finally:
        server.stop()


def test_pending_delays_survive_a_clean_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        api = f"{server.url}/api/v1"
        ok(httpx.put(f"{api}/queues/q", json={}), 201)
        ok(httpx.put(f"{api}/queues/q/groups/g", json={}), 201)
        ok(httpx.post(f"{api}/queues/q/publish", json={"messages": [{"body": "x", "delay_ms": 8_000}]}))
        server.stop()
        server.start()
        assert ok(httpx.get(f"{api}/queues/q"))["scheduled"] == 1
        got: list[dict[str, object]] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = _pull(server, "q", 200)
        assert [m["body"] for m in got] == ["x"]
    finally:
        server.stop()




@pytest.mark.anyio
async def test_the_scheduled_route_lists_the_nearest_with_their_due_times(local_api: httpx.AsyncClient) -> None:
    ok(await local_api.put("/queues/q", json={}), 201)
    at = now_ms() + 60_000
    ok(await local_api.post("/queues/q/publish", json={"messages": [
        {"body": "b", "deliver_at_ms": at + 5, "headers": {"k": "v"}}, {"body_base64": "AAE=", "deliver_at_ms": at}]}))
    page = ok(await local_api.get("/queues/q/scheduled", params={"limit": 1}))
    assert page["scheduled"] == 2 and len(page["messages"]) == 1
    assert (page["messages"][0]["deliver_at_ms"], page["messages"][0]["body_base64"]) == (at, "AAE=")
    both = ok(await local_api.get("/queues/q/scheduled"))["messages"]
    assert [(m["deliver_at_ms"], m.get("body"), m["headers"]) for m in both][1] == (at + 5, "b", {"k": "v"})
    assert (await local_api.get("/queues/q/scheduled", params={"limit": 0})).status_code == 400
    assert (await local_api.get("/queues/nope/scheduled")).json()["error"]["code"] == "queue_not_found"


def test_the_python_clients_publish_delayed_messages(tmp_path: Path) -> None:
    from chunkmq.client import AsyncClient, Client, OutgoingMessage

    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with Client(server.url) as client:
            client.declare_queue("q")
            published = client.publish_to_queue("q", [OutgoingMessage("later", delay_ms=300), "x"])
            result = published.results[0]
            assert result.routed[0].offset is None and result.deliver_at_ms is not None
            assert result.deliver_at_ms > now_ms()
            with pytest.raises(ValueError):
                client.publish_to_queue("q", [OutgoingMessage("later", delay_ms=300)], binary=True)

        async def via_async() -> int | None:
            async with AsyncClient(server.url) as aclient:
                answer = await aclient.publish_to_queue("q", [OutgoingMessage("at", deliver_at_ms=now_ms() + 200)])
                return answer.results[0].deliver_at_ms

        assert asyncio.run(via_async()) is not None
        bodies: list[object] = []
        deadline = time.monotonic() + 10
        while len(bodies) < 3 and time.monotonic() < deadline:
            bodies += [m["body"] for m in _pull(server, "q", 500)]
        assert sorted(map(str, bodies)) == ["at", "later", "x"]
    finally:
        server.stop()


def test_the_websocket_publish_stream_carries_delays_and_refuses_bad_ones(tmp_path: Path) -> None:
    from tests.api.test_streams import open_ws, publish_url, recv, send

    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        ok(httpx.put(f"{server.url}/api/v1/queues/q", json={}), 201)

        async def stream() -> tuple[dict[str, object], dict[str, object]]:
            async with open_ws(publish_url(server)) as ws:
                await send(ws, type="publish", seq=1, messages=[{"body": "w", "routing_key": "q", "delay_ms": 300}])
                confirm = await recv(ws)
                await send(ws, type="publish", seq=2, messages=[{"body": "w", "routing_key": "q", "delay_ms": -1}])
                return confirm, await recv(ws)

        confirm, refused = asyncio.run(stream())
        assert confirm["type"] == "confirm" and confirm["results"][0]["routed"] == [{"queue": "q", "offset": None}]
        error = refused["error"]
        assert refused["type"] == "error" and error["code"] == "invalid_body" and "delay_ms" in error["message"]  # type: ignore[index]
        assert ok(httpx.get(f"{server.url}/api/v1/queues/q"))["scheduled"] in (0, 1)
        got: list[dict[str, object]] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = _pull(server, "q", 500)
        assert [m["body"] for m in got] == ["w"]
    finally:
        server.stop()
