"""Restarts and crashes of a real server process: nothing acknowledged is ever lost."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.api.client import bind, bodies, exchange, ok, publish, queue
from tests.server import ServerProcess


def test_restart_keeps_messages_metadata_and_dedup(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="65536").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            exchange(api, "orders", "topic", alternate_exchange="orders-alt")
            queue(api, "eu", max_messages=1000)
            bind(api, "orders", "eu", "orders.eu.*")
            for i in range(50):  # enough to roll over several 64 KiB chunks
                publish(api, "orders", *({"body": f"{i}-{j}" * 20, "routing_key": "orders.eu.x"} for j in range(10)))
            first = publish(api, "orders", {"body": "once", "routing_key": "orders.eu.x", "idempotency_key": "k1"})
            before = bodies(api, "eu")
        server.restart()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert ok(api.get("/api/v1/exchanges/orders"))["alternate_exchange"] == "orders-alt"
            assert ok(api.get("/api/v1/queues/eu"))["max_messages"] == 1000
            bindings = ok(api.get("/api/v1/bindings", params={"queue": "eu"}))
            assert [b["routing_key"] for b in bindings] == ["orders.eu.*"]
            assert bodies(api, "eu") == before
            again = publish(api, "orders", {"body": "once", "routing_key": "orders.eu.x", "idempotency_key": "k1"})
            assert again["results"][0] == {**first["results"][0], "duplicate": True}
            assert ok(api.get("/api/v1/queues/eu"))["next_offset"] == 501
            second = publish(api, "orders", {"body": "twice", "routing_key": "orders.eu.x", "idempotency_key": "k2"})
        # After a crash the window comes back from its snapshot segments plus the log written after them.
        server.kill()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            for key, earlier in (("k1", first), ("k2", second)):
                again = publish(api, "orders", {"body": "x", "routing_key": "orders.eu.x", "idempotency_key": key})
                assert again["results"][0] == {**earlier["results"][0], "duplicate": True}
            assert ok(api.get("/api/v1/queues/eu"))["next_offset"] == 502
    finally:
        server.stop()


def _publisher(url: str, queue_name: str, worker: int, acked: list[tuple[int, str]], stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=10) as api:
        n = 0
        while not stop.is_set():
            batch = [{"body": f"w{worker}-{n}-{j}", "routing_key": queue_name} for j in range(20)]
            try:
                result = api.post("/api/v1/exchanges/amq.default/publish", json={"messages": batch})
            except httpx.HTTPError:
                return  # the server died under us: this batch was never acknowledged
            if result.status_code != 200:
                return
            for message, r in zip(batch, result.json()["results"], strict=True):
                acked.append((r["routed"][0]["offset"], message["body"]))
            n += 1


def test_kill_9_during_concurrent_publishing_loses_no_acknowledged_message(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always",
                           CHUNKMQ_CHUNK_SIZE="262144").start()
    rng = random.Random(7)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
        expected: dict[int, str] = {}
        for _round in range(3):
            acked: list[tuple[int, str]] = []
            stop = threading.Event()
            threads = [threading.Thread(target=_publisher, args=(server.url, "q", w, acked, stop)) for w in range(4)]
            for t in threads:
                t.start()
            # the kill lands at a random moment after the first acknowledgement (a loaded machine
            # can take longer than the random delay to acknowledge anything)
            deadline = time.monotonic() + 30
            while not acked and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.7))
            server.kill()
            stop.set()
            for t in threads:
                t.join(15)
            assert acked, "no publish was acknowledged before the kill"
            expected.update(acked)
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as api:
                stored: dict[int, Any] = {}
                offset = 0
                while True:
                    page = ok(api.get("/api/v1/queues/q/messages", params={"offset": offset, "limit": 10_000}))
                    for m in page["messages"]:
                        stored[m["offset"]] = m["body"]
                    if not page["messages"]:
                        break
                    offset = page["next_offset"]
            missing = [o for o, body in expected.items() if stored.get(o) != body]
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. offsets {missing[:5]}"
            assert sorted(stored) == list(range(len(stored)))  # dense offsets, no holes
    finally:
        server.stop()


def test_kill_9_during_consumption_resumes_from_the_committed_floor(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "q")
            for i in range(10):
                publish(api, "amq.default", *({"body": str(i * 100 + j), "routing_key": "q"} for j in range(100)))
            done: set[int] = set()
            for _ in range(4):
                page = ok(api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 100}))["messages"]
                ok(api.post("/api/v1/queues/q/groups/g/ack", json={"offsets": [m["offset"] for m in page]}))
                done.update(m["offset"] for m in page)
            time.sleep(1.5)  # floors are written behind at least once a second
            floor = ok(api.get("/api/v1/queues/q/groups/g"))["ack_floor"]
            assert floor == 400
            page = ok(api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 50}))["messages"]
            ok(api.post("/api/v1/queues/q/groups/g/ack", json={"offsets": [m["offset"] for m in page]}))
        server.kill()
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            info = ok(api.get("/api/v1/queues/q/groups/g"))
            assert 400 <= info["ack_floor"] <= 450  # never past what was acked, never before the commit
            seen: list[int] = []
            while page := ok(api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 1000}))["messages"]:
                seen.extend(m["offset"] for m in page)
                ok(api.post("/api/v1/queues/q/groups/g/ack", json={"up_to": page[-1]["offset"] + 1}))
            assert seen == list(range(info["ack_floor"], 1000))  # nothing skipped, nothing below the floor
    finally:
        server.stop()


def test_websocket_acks_with_a_seq_are_confirmed_once_durable(tmp_path: Path) -> None:
    """fsync=always: an `acked` frame answers an ack frame with a seq only once the ack survives a
    kill -9; acks above the floor (out of order) survive too."""
    import asyncio

    from tests.api.test_streams import consume_url, messages_until_quiet, open_ws, recv, send

    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "ws")
            publish(api, "amq.default", *({"body": str(i), "routing_key": "ws"} for i in range(100)))

        async def consume() -> None:
            async with open_ws(consume_url(server, "ws")) as ws:
                await send(ws, type="credit", n=100)
                got = [m["offset"] for m in await messages_until_quiet(ws)]
                assert got == list(range(100))
                await send(ws, type="ack", offsets=[5, 7, 60, 61, 62], seq=1)
                await send(ws, type="ack", up_to=3, seq=2)
                first, second = await recv(ws), await recv(ws)
                assert first == {"type": "acked", "seq": 1, "ack_floor": 0}
                assert second == {"type": "acked", "seq": 2, "ack_floor": 3}

        asyncio.run(asyncio.wait_for(consume(), 60))
        server.kill()  # right after the confirms: nothing may be written behind any more
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            info = ok(api.get("/api/v1/queues/ws/groups/g"))
            assert info["ack_floor"] == 3
            seen: list[int] = []
            while page := ok(api.post("/api/v1/queues/ws/groups/g/pull", json={"max_messages": 1000}))["messages"]:
                seen.extend(m["offset"] for m in page)
                ok(api.post("/api/v1/queues/ws/groups/g/ack", json={"offsets": [m["offset"] for m in page]}))
            assert seen == [o for o in range(3, 100) if o not in (5, 7, 60, 61, 62)]
    finally:
        server.stop()


def test_a_saved_position_past_the_recovered_log_is_clamped_with_a_warning(tmp_path: Path) -> None:
    import sqlite3

    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_LOG_LEVEL="info").start()
    with httpx.Client(base_url=server.url, timeout=30) as api:
        queue(api, "q")
        publish(api, "amq.default", *({"body": str(i), "routing_key": "q"} for i in range(10)))
        ok(api.put("/api/v1/queues/q/groups/g", json={}), 201)
    server.stop()
    # as a write-behind that outran the log before a power cut would have left it
    with sqlite3.connect(tmp_path / "data" / "meta.db") as db:
        db.execute("UPDATE groups SET ack_floor = 50, next_offset = 60, done = '[[52,55]]'")
    db.close()
    server.start()
    try:
        assert "group 'g' of queue 'q': saved position (floor 50, next 60) is past the recovered end 10" in server.log()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            group = ok(api.get("/api/v1/queues/q/groups/g"))
            assert (group["ack_floor"], group["next_offset"], group["lag"]) == (10, 10, 0)
            publish(api, "amq.default", *({"body": f"new-{i}", "routing_key": "q"} for i in range(5)))
            page = ok(api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 100}))["messages"]
            assert [m["body"] for m in page] == [f"new-{i}" for i in range(5)]  # none skipped
    finally:
        server.stop()
