"""GET /api/v1/queues/{q}/history and /groups/{g}/history against a real server sampling every 0.2 s:
values from real publishes and acks, the columnar shape, errors, permissions, and history that
survives a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.client import error, ok, queue
from tests.api.test_auth import client, create_token
from tests.server import ServerProcess

FAST = {"CHUNKMQ_HISTORY_INTERVAL_SECONDS": "0.2", "CHUNKMQ_HISTORY_COARSE_STEP_SECONDS": "1",
        "CHUNKMQ_HISTORY_FLUSH_SECONDS": "0.3"}
QUEUE_KEYS = {"queue", "step", "since", "t", "messages", "bytes", "publish_rate", "deliver_rate"}
GROUP_KEYS = {"queue", "group", "step", "since", "floor_moved_at", "t", "lag", "lag_seconds", "ack_rate",
              "consumers", "ack_floor"}


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(Path(tmp_path_factory.mktemp("history")) / "data", CHUNKMQ_AUTH="off", **FAST).start()
    yield proc
    proc.stop()


@pytest.fixture
def api(sampling: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sampling.url, timeout=30) as c:
        yield c


def wait_for(get: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll a history until `done` holds for it (the sampler runs every 0.2 s)."""
    deadline = time.monotonic() + 10
    while True:
        body = get()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def columns_agree(body: dict[str, Any], keys: set[str]) -> None:
    assert set(body) == keys
    series = [k for k in keys if isinstance(body[k], list)]
    assert {len(body[k]) for k in series} == {len(body["t"])}
    assert body["t"] == sorted(set(body["t"]))


def publish(api: httpx.Client, q: str, n: int) -> None:
    ok(api.post(f"/api/v1/queues/{q}/publish", json={"messages": [{"body": f"m{i}"} for i in range(n)]}))


def test_queue_and_group_history_follow_publishes_and_acks(api: httpx.Client) -> None:
    queue(api, "orders")
    publish(api, "orders", 20)
    pulled = ok(api.post("/api/v1/queues/orders/groups/billing/pull", json={"max_messages": 10, "consumer": "c1"}))
    assert len(pulled["messages"]) == 10
    ok(api.post("/api/v1/queues/orders/groups/billing/ack", json={"up_to": 5}))

    def q_history() -> dict[str, Any]:
        return dict(ok(api.get("/api/v1/queues/orders/history")))

    def g_history() -> dict[str, Any]:
        return dict(ok(api.get("/api/v1/queues/orders/groups/billing/history")))

    body = wait_for(q_history, lambda b: len(b["t"]) >= 2 and b["messages"][-1] == 20)
    columns_agree(body, QUEUE_KEYS)
    assert body["queue"] == "orders" and body["step"] == 0.2
    assert body["messages"][-1] == 20 and body["bytes"][-1] > 0
    assert all(r >= 0 for r in body["publish_rate"] + body["deliver_rate"])
    assert body["since"] <= body["t"][0]
    group = wait_for(g_history, lambda b: bool(b["t"]) and b["ack_floor"][-1] == 5)
    columns_agree(group, GROUP_KEYS)
    assert (group["lag"][-1], group["ack_floor"][-1], group["consumers"][-1]) == (15, 5, 1)
    assert group["lag_seconds"][-1] >= 0
    moved = group["floor_moved_at"]
    assert isinstance(moved, int) and moved <= group["t"][-1]

    # a later ack moves the floor, and floor_moved_at with it; publishes show as a publish rate
    publish(api, "orders", 50)
    ok(api.post("/api/v1/queues/orders/groups/billing/ack", json={"up_to": 10}))
    group = wait_for(g_history, lambda b: b["ack_floor"][-1] == 10)
    assert group["floor_moved_at"] > moved and group["lag"][-1] == 60
    assert max(group["ack_rate"]) > 0
    ok(api.post("/api/v1/queues/orders/groups/billing/pull", json={"max_messages": 5, "consumer": "c1"}))
    body = wait_for(q_history, lambda b: max(b["publish_rate"]) > 0 and max(b["deliver_rate"]) > 0)
    assert body["messages"][-1] == 70 and max(body["publish_rate"]) > 0 and max(body["deliver_rate"]) > 0

    # a coarser step: one point per whole second, stamped with its first sample's time (a sample's)
    coarse = ok(api.get("/api/v1/queues/orders/history", params={"step": 1}))
    columns_agree(coarse, QUEUE_KEYS)
    seconds = [t // 1000 for t in coarse["t"]]
    assert coarse["step"] == 1.0 and seconds == sorted(set(seconds))
    assert set(coarse["t"]) <= set(ok(api.get("/api/v1/queues/orders/history"))["t"])
    since = body["t"][-1]
    recent = ok(api.get("/api/v1/queues/orders/history", params={"since": since}))
    assert recent["since"] == since and all(t >= since for t in recent["t"])


def test_history_errors(api: httpx.Client) -> None:
    queue(api, "hist-errors")
    error(api.get("/api/v1/queues/nope/history"), 404, "queue_not_found")
    error(api.get("/api/v1/queues/hist-errors/groups/nope/history"), 404, "group_not_found")
    error(api.get("/api/v1/queues/bad name!/history"), 400, "invalid_name")
    for params in ({"step": 0}, {"step": "x"}, {"since": -1}, {"step": 100_000}):
        error(api.get("/api/v1/queues/hist-errors/history", params=params), 400, "invalid_request")


def test_history_needs_read_permission(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", **FAST).start()
    try:
        admin_token = (server.data_dir / "admin-token").read_text().strip()
        reader = create_token(server.data_dir, "--name", "reader", "--read", "orders.*")
        with client(server, admin_token) as admin:
            queue(admin, "orders.eu")
            queue(admin, "payments")
            ok(admin.put("/api/v1/queues/orders.eu/groups/g", json={}), 201)
            ok(admin.put("/api/v1/queues/payments/groups/g", json={}), 201)
        with client(server, reader) as c:
            ok(c.get("/api/v1/queues/orders.eu/history"))
            ok(c.get("/api/v1/queues/orders.eu/groups/g/history"))
            error(c.get("/api/v1/queues/payments/history"), 403, "forbidden")
            error(c.get("/api/v1/queues/payments/groups/g/history"), 403, "forbidden")
        with client(server, None) as anonymous:
            error(anonymous.get("/api/v1/queues/orders.eu/history"), 401, "unauthorized")
    finally:
        server.stop()


def test_history_and_floor_moved_at_survive_a_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", **FAST).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "kept")
            publish(api, "kept", 7)
            ok(api.post("/api/v1/queues/kept/groups/g/pull", json={"max_messages": 3}))
            ok(api.post("/api/v1/queues/kept/groups/g/ack", json={"up_to": 3}))
            before = wait_for(lambda: dict(ok(api.get("/api/v1/queues/kept/groups/g/history"))),
                              lambda b: len(b["t"]) >= 3 and b["ack_floor"][-1] == 3)
            assert before["ack_floor"][-1] == 3
        server.restart()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            since = before["t"][0]
            after = wait_for(lambda: dict(ok(api.get("/api/v1/queues/kept/groups/g/history",
                                                     params={"since": since}))),
                             lambda b: b["t"][-1] > before["t"][-1] + 1000)
            # every point from before the restart is still there, and sampling went on after it
            assert after["t"][: len(before["t"])] == before["t"]
            assert after["lag"][: len(before["t"])] == before["lag"]
            assert after["t"][-1] > before["t"][-1]
            assert after["floor_moved_at"] == before["floor_moved_at"]  # the floor has not moved since
            q = ok(api.get("/api/v1/queues/kept/history", params={"since": since}))
            assert q["messages"][0] == 7 and q["t"][0] == since
            coarse = ok(api.get("/api/v1/queues/kept/history", params={"since": since - 1000, "step": 1}))
            assert coarse["t"][0] <= since and coarse["messages"][0] == 7
    finally:
        server.stop()
