"""Strict bodies and specific messages (real server): unknown fields are refused and named, every
message names its field, nack can reject, ack cannot skip, names that URLs cannot carry are refused."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.api.client import bind, error, exchange, ok, queue
from tests.api.test_groups import fill, group, pull


@pytest.mark.parametrize("path, body", [
    ("groups/g/ack", {"offsets": [0], "requeue": False}),
    ("groups/g/nack", {"offsets": [0], "requeu": False}),
    ("groups/g/seek", {"to": "earliest", "extra": 1}),
    ("groups/g/pull", {"max_messages": 1, "waitms": 5}),
    ("groups/g/pull", {"ack": {"up_to": 0, "offset": 1}}),
])
def test_unknown_fields_are_refused_by_name(api: httpx.Client, name: str, path: str, body: dict[str, Any]) -> None:
    queue(api, name)
    fill(api, name, 1)
    pull(api, name, "g")
    message = error(api.post(f"/api/v1/queues/{name}/{path}", json=body), 400, "invalid_body")
    (unknown,) = set(body) - {"offsets", "to", "max_messages", "ack"} or set(body["ack"]) - {"up_to"}
    assert f"unknown field {unknown}" in message, message
    assert group(api, name, "g")["in_flight"] == 1  # nothing was applied


def test_messages_name_the_field(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 2)
    pull(api, name, "g", 2)
    url = f"/api/v1/queues/{name}/groups/g"
    assert error(api.post(f"{url}/ack", json={"up_to": -1}), 400, "invalid_body") == (
        "up_to must be a non-negative integer")
    assert error(api.post(f"{url}/ack", json={"up_to": 1, "offsets": [0]}), 400, "invalid_body") == (
        "give offsets or up_to, not both")
    assert "offset must be a non-negative integer" in error(
        api.post(f"{url}/seek", json={"offset": "1"}), 400, "invalid_body")
    assert "requeue must be true or false" in error(
        api.post(f"{url}/nack", json={"offsets": [0], "requeue": "no"}), 400, "invalid_body")
    assert error(api.post(f"{url}/pull", json={"ack": {"up_to": -1}}), 400, "invalid_body") == (
        "ack: up_to must be a non-negative integer")


def test_ack_up_to_beyond_delivered_is_invalid_ack(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 5)
    pull(api, name, "g", 2)  # offsets 0 and 1 delivered
    url = f"/api/v1/queues/{name}/groups/g"
    message = error(api.post(f"{url}/ack", json={"up_to": 3}), 400, "invalid_ack")
    assert "seek" in message
    error(api.post(f"{url}/pull", json={"ack": {"up_to": 4}}), 400, "invalid_ack")
    assert ok(api.post(f"{url}/ack", json={"up_to": 2}))["ack_floor"] == 2
    assert [m["offset"] for m in pull(api, name, "g", 10)] == [2, 3, 4]  # nothing was skipped


def test_nack_without_requeue_dead_letters_at_once(api: httpx.Client, name: str) -> None:
    dlx, dlq = f"{name}-dlx", f"{name}-dlq"
    exchange(api, dlx, "fanout")
    queue(api, dlq)
    bind(api, dlx, dlq)
    queue(api, name, dead_letter_exchange=dlx, max_deliveries=10)
    fill(api, name, 2)
    pull(api, name, "g", 2)
    url = f"/api/v1/queues/{name}/groups/g"
    result = ok(api.post(f"{url}/nack", json={"offsets": [0], "requeue": False}))
    assert result["exhausted"] == 1
    ok(api.post(f"{url}/nack", json={"offsets": [1]}))  # default requeue: true
    assert [m["offset"] for m in pull(api, name, "g", 10, wait_ms=1000)] == [1]
    (dead,) = ok(api.get(f"/api/v1/queues/{dlq}/messages"))["messages"]
    assert dead["body"] == "0" and dead["headers"]["x-death-reason"] == "rejected"


def test_nack_without_requeue_and_without_dead_letter_exchange_drops_and_counts(api: httpx.Client, name: str) -> None:
    queue(api, name)
    fill(api, name, 1)
    pull(api, name, "g")
    ok(api.post(f"/api/v1/queues/{name}/groups/g/nack", json={"offsets": [0], "requeue": False}))
    assert pull(api, name, "g", wait_ms=100) == []
    assert group(api, name, "g")["lag"] == 0
    assert ok(api.get(f"/api/v1/queues/{name}"))["messages_dropped"] == 1


def test_empty_tag_filter_is_refused(api: httpx.Client, name: str) -> None:
    queue(api, name)
    message = error(api.put(f"/api/v1/queues/{name}/groups/g", json={"tag_filter": []}), 400, "invalid_body")
    assert "tag_filter" in message
    ok(api.put(f"/api/v1/queues/{name}/groups/g", json={"tag_filter": None}), 201)


def test_409_shows_settings_as_json(api: httpx.Client, name: str) -> None:
    queue(api, name, max_messages=5)
    message = error(api.put(f"/api/v1/queues/{name}", json={"max_messages": 6}), 409, "precondition_failed")
    settings = orjson.loads(message[message.index("{"):])
    assert settings["max_messages"] == 5 and settings["dead_letter_exchange"] is None
    exchange(api, f"{name}-x", "direct")
    message = error(api.put(f"/api/v1/exchanges/{name}-x", json={"type": "fanout"}), 409, "precondition_failed")
    assert orjson.loads(message[message.index("{"):]) == {"type": "direct", "alternate_exchange": None}


def test_body_over_the_limit_on_other_routes_is_body_too_large(api: httpx.Client, name: str) -> None:
    big = b'{"max_messages": 1, "consumer": "' + b"x" * (1024 * 1024) + b'"}'
    headers = {"content-type": "application/json"}
    error(api.put(f"/api/v1/queues/{name}", content=big, headers=headers), 413, "body_too_large")
    error(api.post(f"/api/v1/queues/{name}/groups/g/ack", content=big, headers=headers), 413, "body_too_large")


def test_dot_names_and_the_amq_prefix_are_refused(api: httpx.Client) -> None:
    for path in ("/api/v1/queues/%2E", "/api/v1/queues/%2E%2E", "/api/v1/exchanges/%2E"):
        response = api.put(path, json={"type": "direct"} if "exchanges" in path else {})
        error(response, 400, "invalid_name")
    error(api.put("/api/v1/queues/amq.mine", json={}), 400, "invalid_name")
    error(api.put("/api/v1/exchanges/amq.mine", json={"type": "direct"}), 400, "invalid_name")
    error(api.post("/api/v1/bindings", json={"exchange": "..", "queue": "q"}), 400, "invalid_name")


def test_stream_frames_refuse_unknown_fields(shared_server: Any, name: str) -> None:
    from tests.api.test_streams import consume_url, open_ws, recv, run, send

    async def main() -> None:
        async with open_ws(consume_url(shared_server, name)) as ws:
            for frame in ({"type": "credit", "n": 1, "m": 2}, {"type": "nack", "offsets": [0], "requeu": True},
                          {"type": "ack", "up_to": 0, "x": 1}, {"type": "close", "requeue": True, "now": 1}):
                await send(ws, **frame)
                answer = await recv(ws)
                assert answer["type"] == "error" and "unknown field" in answer["error"]["message"], answer

    with httpx.Client(base_url=shared_server.url) as api:
        queue(api, name)
    run(main())


def test_the_server_agrees_with_its_openapi_document(api: httpx.Client, name: str) -> None:
    """What the document allows is accepted and what it forbids is refused (found by schemathesis)."""
    # JSON has one number type: 28.0 is the integer 28, 28.5 is not an integer
    assert queue(api, name, max_messages=28.0)["max_messages"] == 28
    error(api.patch(f"/api/v1/queues/{name}", json={"max_bytes": 28.5}), 400, "invalid_body")
    error(api.patch(f"/api/v1/queues/{name}", json={"max_deliveries": 2**63}), 400, "invalid_body")  # was a 500
    fill(api, name, 3)
    assert len(ok(api.post(f"/api/v1/queues/{name}/groups/g/pull", json={"max_messages": 2.0}))["messages"]) == 2
    body = {"max_messages": 1e0, "ack": {"up_to": 2.0}}
    assert len(ok(api.post(f"/api/v1/queues/{name}/groups/g/pull", json=body))["messages"]) == 1
    assert group(api, name, "g")["ack_floor"] == 2
    error(api.post(f"/api/v1/queues/{name}/groups/g/seek", json={"timestamp": 2**63}), 400, "invalid_body")
    # offset and timestamp together: from the later of the two
    page = ok(api.get(f"/api/v1/queues/{name}/messages", params={"offset": 2, "timestamp": 0}))
    assert [m["offset"] for m in page["messages"]] == [2]
    # headers: an object or null, not false
    bad = {"messages": [{"body": "x", "headers": False}]}
    error(api.post(f"/api/v1/queues/{name}/publish", json=bad), 400, "invalid_body")
    # the default exchange: declared as it is, never deleted
    assert ok(api.put("/api/v1/exchanges/amq.default", json={"type": "direct"}))["name"] == "amq.default"
    error(api.put("/api/v1/exchanges/amq.default", json={"type": "fanout"}), 409, "precondition_failed")
    error(api.delete("/api/v1/exchanges/amq.default"), 409, "precondition_failed")
    error(api.post("/api/v1/definitions", json={"chunkmq_version": {}}), 400, "invalid_body")
