"""Consumer groups over HTTP: competing consumers, acks, redelivery, dead-lettering, seek, filters."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.api.client import bind, error, exchange, ok, publish, queue


def fill(api: httpx.Client, q: str, n: int, start: int = 0, **extra: Any) -> None:
    publish(api, "amq.default", *({"body": str(i), "routing_key": q, **extra} for i in range(start, start + n)))


def pull(api: httpx.Client, q: str, g: str, n: int = 100, wait_ms: int = 0,
         consumer: str = "c1") -> list[dict[str, Any]]:
    body = {"max_messages": n, "wait_ms": wait_ms, "consumer": consumer}
    return list(ok(api.post(f"/api/v1/queues/{q}/groups/{g}/pull", json=body))["messages"])


def ack(api: httpx.Client, q: str, g: str, **body: Any) -> dict[str, Any]:
    return dict(ok(api.post(f"/api/v1/queues/{q}/groups/{g}/ack", json=body)))


def group(api: httpx.Client, q: str, g: str) -> dict[str, Any]:
    return dict(ok(api.get(f"/api/v1/queues/{q}/groups/{g}")))


def test_competing_consumers_get_disjoint_messages(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 300)
    seen: list[list[int]] = [[], [], []]
    while True:
        batches = [pull(api, name, "g", 25, consumer=f"c{i}") for i in range(3)]
        if not any(batches):
            break
        for i, batch in enumerate(batches):
            seen[i].extend(m["offset"] for m in batch)
            if batch:
                ack(api, name, "g", offsets=[m["offset"] for m in batch])
    everything = [o for s in seen for o in s]
    assert sorted(everything) == list(range(300))  # all of them, each once
    assert all(seen)  # and each consumer had a share
    info = group(api, name, "g")
    assert (info["ack_floor"], info["lag"], info["in_flight"]) == (300, 0, 0)
    assert {c["id"] for c in info["consumers"]} == {"c0", "c1", "c2"}


def test_cumulative_ack_and_lag(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 10)
    messages = pull(api, name, "g", 6)
    assert [m["offset"] for m in messages] == list(range(6))
    assert all(m["delivery_count"] == 1 for m in messages)
    assert group(api, name, "g")["lag"] == 10
    assert ack(api, name, "g", up_to=4)["ack_floor"] == 4
    result = ack(api, name, "g", offsets=[5, 99])
    assert result["ack_floor"] == 4 and result["not_in_flight"] == [99]
    assert ack(api, name, "g", offsets=[4])["ack_floor"] == 6
    assert group(api, name, "g")["lag"] == 4
    error(api.post(f"/api/v1/queues/{name}/groups/g/ack", json={}), 400, "invalid_body")
    error(api.post(f"/api/v1/queues/{name}/groups/nope/ack", json={"up_to": 1}), 404, "group_not_found")


def test_nack_with_delay_redelivers_later(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 2)
    first = pull(api, name, "g", 2)
    ok(api.post(f"/api/v1/queues/{name}/groups/g/nack", json={"offsets": [0], "delay_ms": 300}))
    assert pull(api, name, "g") == []
    again = pull(api, name, "g", wait_ms=2000)
    assert [(m["offset"], m["delivery_count"]) for m in again] == [(0, 2)]
    assert again[0]["id"] == first[0]["id"]


def test_ack_timeout_redelivers(api: httpx.Client, name: str) -> None:
    queue(api, name, ack_timeout_ms=200)
    fill(api, name, 1)
    started = time.monotonic()  # before the delivery, which the ack timeout counts from
    assert [m["offset"] for m in pull(api, name, "g", consumer="slow")] == [0]
    again = pull(api, name, "g", wait_ms=3000, consumer="fast")
    assert [(m["offset"], m["delivery_count"]) for m in again] == [(0, 2)]
    assert 0.2 - 0.002 <= time.monotonic() - started < 3.0  # the server counts whole ms


def test_dead_lettering_after_max_deliveries(api: httpx.Client, name: str) -> None:
    dlx, dlq = f"{name}-dlx", f"{name}-dlq"
    exchange(api, dlx, "fanout")
    queue(api, dlq)
    bind(api, dlx, dlq)
    queue(api, name, max_deliveries=2, dead_letter_exchange=dlx, ack_timeout_ms=60_000)
    fill(api, name, 1, headers={"h": "v"})
    for _ in range(2):
        (message,) = pull(api, name, "g", wait_ms=1000)
        ok(api.post(f"/api/v1/queues/{name}/groups/g/nack", json={"offsets": [message["offset"]]}))
    assert pull(api, name, "g", wait_ms=200) == []
    assert group(api, name, "g")["lag"] == 0
    (dead,) = ok(api.get(f"/api/v1/queues/{dlq}/messages"))["messages"]
    assert dead["body"] == "0"
    assert dead["headers"]["h"] == "v"
    assert dead["headers"]["x-death-reason"] == "delivery_limit"
    assert dead["headers"]["x-death-queue"] == name
    assert dead["headers"]["x-death-group"] == "g"
    assert dead["headers"]["x-delivery-count"] == "2"
    assert dead["headers"]["x-original-offset"] == "0"


def test_long_poll_is_woken_by_a_publish(api: httpx.Client, shared_server: Any, name: str) -> None:
    queue(api, name)
    ok(api.put(f"/api/v1/queues/{name}/groups/g", json={"start": "latest"}), 201)
    got: list[float] = []

    def waiter() -> None:
        with httpx.Client(base_url=shared_server.url, timeout=30) as c:
            messages = pull(c, name, "g", wait_ms=10_000)
            got.append(time.monotonic())
            assert [m["body"] for m in messages] == ["wake"]

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)
    published = time.monotonic()
    fill_body = {"messages": [{"body": "wake", "routing_key": name}]}
    ok(api.post("/api/v1/exchanges/amq.default/publish", json=fill_body))
    thread.join(10)
    assert got and got[0] - published < 0.05


def test_seek(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 5)
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    fill(api, name, 5, start=5)
    pull(api, name, "g", 3)
    url = f"/api/v1/queues/{name}/groups/g/seek"
    assert ok(api.post(url, json={"to": "latest"}))["next_offset"] == 10
    assert pull(api, name, "g") == []
    state = ok(api.post(url, json={"timestamp": middle}))
    assert (state["next_offset"], state["in_flight"]) == (5, 0)
    assert [m["offset"] for m in pull(api, name, "g", 2)] == [5, 6]
    assert ok(api.post(url, json={"offset": 2}))["ack_floor"] == 2
    assert ok(api.post(url, json={"to": "earliest"}))["next_offset"] == 0
    error(api.post(url, json={"to": "middle"}), 400, "invalid_body")
    error(api.post(url, json={"offset": 1, "to": "latest"}), 400, "invalid_body")


def test_tag_filter_skips_and_lag_counts_only_matching(api: httpx.Client, name: str) -> None:
    queue(api, name)
    ok(api.put(f"/api/v1/queues/{name}/groups/paid", json={"tag_filter": ["paid"]}), 201)
    tags = ["paid", "created", "created", "paid", "created", "paid"]
    publish(api, "amq.default", *({"body": str(i), "routing_key": name, "tag": t} for i, t in enumerate(tags)))
    assert group(api, name, "paid")["lag"] == 3
    messages = pull(api, name, "paid", 10)
    assert [m["offset"] for m in messages] == [0, 3, 5]
    assert ack(api, name, "paid", offsets=[0, 3, 5])["ack_floor"] == 6
    assert group(api, name, "paid")["lag"] == 0


def test_group_declare_and_delete(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 3)
    created = api.put(f"/api/v1/queues/{name}/groups/late", json={"start": "latest"})
    assert created.status_code == 201 and created.json()["next_offset"] == 3
    assert api.put(f"/api/v1/queues/{name}/groups/late", json={"start": "latest"}).status_code == 200
    assert [g["name"] for g in ok(api.get(f"/api/v1/queues/{name}/groups"))] == ["late"]
    ok(api.delete(f"/api/v1/queues/{name}/groups/late"), 204)
    error(api.get(f"/api/v1/queues/{name}/groups/late"), 404, "group_not_found")
    error(api.post(f"/api/v1/queues/{name}/groups/g/pull", json={"max_messages": 1001}), 400, "invalid_body")
    error(api.post(f"/api/v1/queues/{name}/groups/g/pull", json={"wait_ms": 30_001}), 400, "invalid_body")
    error(api.post(f"/api/v1/queues/{name}/groups/bad name/pull", json={}), 400, "invalid_name")


def test_retirement_flow(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 3)
    pull(api, name, "g", 2)
    ok(api.patch(f"/api/v1/queues/{name}", json={"producer_visible": False}))
    error(api.delete(f"/api/v1/queues/{name}"), 409, "precondition_failed")
    pull(api, name, "g", 10)
    ack(api, name, "g", up_to=3)
    ok(api.patch(f"/api/v1/queues/{name}", json={"consumer_visible": False}))
    error(api.post(f"/api/v1/queues/{name}/groups/g/pull", json={}), 409, "precondition_failed")
    ok(api.delete(f"/api/v1/queues/{name}"), 204)


def test_group_overtaken_by_limits_reports_what_it_missed(api: httpx.Client, name: str) -> None:
    queue(api, name, max_messages=5)
    ok(api.put(f"/api/v1/queues/{name}/groups/g", json={}), 201)
    fill(api, name, 10)
    info = group(api, name, "g")  # counted when the limit deleted them, before any delivery
    assert (info["missed"], info["behind_retention"], info["lag"]) == (5, False, 5)
    assert [m["offset"] for m in pull(api, name, "g", 10)] == [5, 6, 7, 8, 9]
    info = group(api, name, "g")
    assert (info["missed"], info["behind_retention"], info["lag"]) == (5, False, 5)


def test_past_max_deliveries_without_dead_letter_exchange_is_dropped_and_counted(api: httpx.Client, name: str) -> None:
    queue(api, name, max_deliveries=1)
    fill(api, name, 2)
    pull(api, name, "g", 2)
    result = ok(api.post(f"/api/v1/queues/{name}/groups/g/nack", json={"offsets": [0, 1]}))
    assert result["exhausted"] == 2
    assert pull(api, name, "g", wait_ms=100) == []
    assert group(api, name, "g")["lag"] == 0
    assert ok(api.get(f"/api/v1/queues/{name}"))["messages_dropped"] == 2


def test_pull_can_carry_the_previous_ack(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 6)
    url = f"/api/v1/queues/{name}/groups/g/pull"
    first = ok(api.post(url, json={"max_messages": 3}))["messages"]
    second = ok(api.post(url, json={"max_messages": 3, "ack": {"up_to": first[-1]["offset"] + 1}}))["messages"]
    assert [m["offset"] for m in second] == [3, 4, 5]
    assert group(api, name, "g")["ack_floor"] == 3
    ok(api.post(url, json={"ack": {"offsets": [3, 4, 5]}}))
    assert group(api, name, "g")["ack_floor"] == 6
    error(api.post(url, json={"ack": [1]}), 400, "invalid_body")
    error(api.post(f"/api/v1/queues/{name}/groups/none/pull", json={"ack": {"up_to": 1}}), 404, "group_not_found")


def _counter(api: httpx.Client, name: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(f"chunkmq_messages_{name}_total "):
            return float(line.split()[1])
    raise AssertionError(f"chunkmq_messages_{name}_total missing from /metrics")


def test_metrics_count_dead_lettered_and_dropped_messages(api: httpx.Client, name: str) -> None:
    dlx = f"{name}-dlx"
    exchange(api, dlx, "fanout")
    queue(api, f"{name}-dlq")
    bind(api, dlx, f"{name}-dlq")
    queue(api, name, max_deliveries=1, dead_letter_exchange=dlx)
    queue(api, f"{name}-nodlx", max_deliveries=1)
    before = {n: _counter(api, n) for n in ("dead_lettered", "dropped", "delivered")}
    for q in (name, f"{name}-nodlx"):
        fill(api, q, 1)
        pull(api, q, "g")
        ok(api.post(f"/api/v1/queues/{q}/groups/g/nack", json={"offsets": [0]}))
    assert _counter(api, "dead_lettered") == before["dead_lettered"] + 1
    assert _counter(api, "dropped") == before["dropped"] + 1
    assert _counter(api, "delivered") == before["delivered"] + 2



def test_the_in_flight_route(api: httpx.Client, name: str) -> None:
    queue(api, name, ack_timeout_ms=60_000)
    ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": [{"body": f"m{i}"} for i in range(5)]}))
    pulled = pull(api, name, "g", 3)
    before = int(time.time() * 1000)
    page = ok(api.get(f"/api/v1/queues/{name}/groups/g/inflight", params={"limit": 2}))
    assert page["in_flight"] == 3 and page["next_after"] == 1
    assert [(m["offset"], m["id"], m["consumer"], m["delivery_count"]) for m in page["messages"]] == [
        (m["offset"], m["id"], "c1", 1) for m in pulled[:2]]
    assert set(page["messages"][0]) == {"offset", "id", "consumer", "delivery_count", "deadline"}
    assert before + 50_000 < page["messages"][0]["deadline"] <= before + 61_000
    last = ok(api.get(f"/api/v1/queues/{name}/groups/g/inflight", params={"after": 1}))
    assert [m["offset"] for m in last["messages"]] == [2] and last["next_after"] is None
    error(api.get(f"/api/v1/queues/{name}/groups/nope/inflight"), 404, "group_not_found")
    error(api.get(f"/api/v1/queues/{name}/groups/g/inflight", params={"limit": 0}), 400, "invalid_request")
