"""Declaring, changing and deleting exchanges and queues; the error shapes of API.md."""

from __future__ import annotations

import httpx

from tests.api.client import bind, error, exchange, ok, publish, queue


def test_exchange_declare_is_idempotent(api: httpx.Client, name: str) -> None:
    created = api.put(f"/api/v1/exchanges/{name}", json={"type": "topic"})
    assert created.status_code == 201
    assert api.put(f"/api/v1/exchanges/{name}", json={"type": "topic"}).status_code == 200
    error(api.put(f"/api/v1/exchanges/{name}", json={"type": "fanout"}), 409, "precondition_failed")
    info = ok(api.get(f"/api/v1/exchanges/{name}"))
    assert (info["name"], info["type"], info["alternate_exchange"]) == (name, "topic", None)
    assert name in [e["name"] for e in ok(api.get("/api/v1/exchanges"))]
    assert "amq.default" in [e["name"] for e in ok(api.get("/api/v1/exchanges"))]


def test_exchange_validation(api: httpx.Client) -> None:
    error(api.put("/api/v1/exchanges/x", json={"type": "nope"}), 400, "invalid_body")
    error(api.put("/api/v1/exchanges/x", json={}), 400, "invalid_body")
    error(api.put("/api/v1/exchanges/x", content=b"{", headers={"content-type": "application/json"}),
          400, "invalid_body")
    error(api.put("/api/v1/exchanges/" + "a" * 201, json={"type": "direct"}), 400, "invalid_name")
    error(api.put("/api/v1/exchanges/amq.mine", json={"type": "direct"}), 400, "invalid_name")
    error(api.get("/api/v1/exchanges/missing"), 404, "exchange_not_found")
    error(api.delete("/api/v1/exchanges/missing"), 404, "exchange_not_found")


def test_exchange_delete_if_unused(api: httpx.Client, name: str) -> None:
    exchange(api, name, "fanout")
    queue(api, name)
    bind(api, name, name)
    error(api.delete(f"/api/v1/exchanges/{name}", params={"if_unused": "true"}), 409, "precondition_failed")
    ok(api.delete(f"/api/v1/exchanges/{name}"), 204)
    assert ok(api.get("/api/v1/bindings", params={"queue": name})) == []


def test_queue_declare_and_settings(api: httpx.Client, name: str) -> None:
    response = api.put(f"/api/v1/queues/{name}", json={"max_messages": 10, "ack_timeout_ms": 5000})
    assert response.status_code == 201
    info = response.json()
    assert (info["max_messages"], info["ack_timeout_ms"], info["overflow"]) == (10, 5000, "drop_head")
    assert (info["first_offset"], info["next_offset"], info["messages"], info["bytes"]) == (0, 0, 0, 0)
    assert api.put(f"/api/v1/queues/{name}", json={"max_messages": 10, "ack_timeout_ms": 5000}).status_code == 200
    error(api.put(f"/api/v1/queues/{name}", json={"max_messages": 11}), 409, "precondition_failed")
    error(api.put(f"/api/v1/queues/{name}-b", json={"max_messages": -1}), 400, "invalid_body")
    error(api.put(f"/api/v1/queues/{name}-b", json={"overflow": "explode"}), 400, "invalid_body")
    error(api.put(f"/api/v1/queues/{name}-b", json={"colour": "red"}), 400, "invalid_body")
    patched = ok(api.patch(f"/api/v1/queues/{name}", json={"producer_visible": False, "max_messages": 20}))
    assert (patched["producer_visible"], patched["max_messages"]) == (False, 20)
    error(api.patch(f"/api/v1/queues/{name}", json={"producer_visible": "no"}), 400, "invalid_body")


def test_invisible_queue_is_skipped_by_routing(api: httpx.Client, name: str) -> None:
    exchange(api, name, "fanout")
    queue(api, name)
    bind(api, name, name)
    ok(api.patch(f"/api/v1/queues/{name}", json={"producer_visible": False}))
    result = publish(api, name, {"body": "x"})
    assert result["results"][0]["routed"] == []
    error(api.post(f"/api/v1/queues/{name}/publish", json={"messages": [{"body": "x"}]}), 409, "precondition_failed")


def test_queue_delete_needs_force_when_not_empty(api: httpx.Client, name: str) -> None:
    queue(api, name)
    publish(api, "amq.default", {"body": "x", "routing_key": name})
    error(api.delete(f"/api/v1/queues/{name}"), 409, "precondition_failed")
    ok(api.delete(f"/api/v1/queues/{name}", params={"force": "true"}), 204)
    error(api.get(f"/api/v1/queues/{name}"), 404, "queue_not_found")
    # A new queue of the same name starts empty (it gets a new id, hence new files).
    assert queue(api, name)["messages"] == 0


def test_purge(api: httpx.Client, name: str) -> None:
    queue(api, name)
    publish(api, "amq.default", *({"body": "x", "routing_key": name} for _ in range(4)))
    assert ok(api.post(f"/api/v1/queues/{name}/purge")) == {"purged": 4}
    info = ok(api.get(f"/api/v1/queues/{name}"))
    assert (info["first_offset"], info["next_offset"], info["messages"]) == (4, 4, 0)
    ok(api.delete(f"/api/v1/queues/{name}"), 204)


def test_binding_validation(api: httpx.Client, name: str) -> None:
    queue(api, name)
    error(api.post("/api/v1/bindings", json={"exchange": "missing", "queue": name}), 404, "exchange_not_found")
    exchange(api, name, "headers")
    error(api.post("/api/v1/bindings", json={"exchange": name, "queue": "missing"}), 404, "queue_not_found")
    error(api.post("/api/v1/bindings", json={"exchange": "amq.default", "queue": name}), 400, "invalid_body")
    error(api.post("/api/v1/bindings", json={"exchange": name, "queue": name, "arguments": {"x-match": "some"}}),
          400, "invalid_body")
    error(api.post("/api/v1/bindings", json={"exchange": name}), 400, "invalid_body")
    error(api.delete("/api/v1/bindings/abc"), 400, "invalid_request")


def test_operations_endpoints(api: httpx.Client) -> None:
    overview = ok(api.get("/api/v1/overview"))
    assert overview["durability"] == "interval"
    assert {"exchanges", "queues", "messages", "bytes", "disk_free_bytes"} <= overview["totals"].keys()
    assert {"publish", "deliver", "ack"} <= overview["rates"].keys()
    chunks = ok(api.get("/api/v1/storage/chunks"))
    assert chunks and {"number", "state", "records"} <= chunks[0].keys()
    assert ok(api.get("/readyz")) == {"status": "ready"}
    metrics = api.get("/metrics")
    assert metrics.status_code == 200 and "chunkmq_messages_published_total" in metrics.text
    assert "chunkmq_queue_messages" in metrics.text
    error(api.get("/api/v1/nothing-here"), 404, "not_found")
    assert api.get("/openapi.json").status_code == 200
