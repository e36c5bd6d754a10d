"""Publish and read back: bodies, headers, batches, limits, idempotency, lookups by id and time."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson

from tests.api.client import bodies, browse, error, ok, publish, queue
from tests.broker.test_message import binary_body
from tests.server import ServerProcess


def test_text_binary_headers_round_trip(api: httpx.Client, name: str) -> None:
    queue(api, name)
    raw = bytes(range(256))
    result = publish(
        api, "amq.default",
        {"body": "héllo \"json\" \n", "routing_key": name, "headers": {"k": "v", "ü": "ß"}, "tag": "created"},
        {"body_base64": base64.b64encode(raw).decode(), "routing_key": name},
    )
    assert result["durability"] == "interval"
    assert [r["routed"] for r in result["results"]] == [[{"queue": name, "offset": 0}], [{"queue": name, "offset": 1}]]
    text, binary = browse(api, name)
    assert text["body"] == "héllo \"json\" \n"
    assert text["headers"] == {"k": "v", "ü": "ß"}
    assert text["tag"] == "created"
    assert text["routing_key"] == name
    assert text["exchange"] == ""
    assert text["queue"] == name and text["offset"] == 0
    assert text["id"] == result["results"][0]["id"]
    assert abs(text["timestamp"] - time.time() * 1000) < 60_000
    assert base64.b64decode(binary["body_base64"]) == raw
    assert "body" not in binary
    # The same message by id, and as base64 on request.
    assert ok(api.get(f"/api/v1/messages/{text['id']}"))["body"] == text["body"]
    page = ok(api.get(f"/api/v1/queues/{name}/messages", params={"offset": 0, "encoding": "base64"}))
    assert base64.b64decode(page["messages"][0]["body_base64"]).decode() == text["body"]


def test_publish_straight_to_a_queue(api: httpx.Client, name: str) -> None:
    queue(api, name)
    result = ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": [{"body": "a"}, {"body": "b"}]}))
    assert [r["routed"][0]["offset"] for r in result["results"]] == [0, 1]
    assert bodies(api, name) == ["a", "b"]
    error(api.post("/api/v1/queues/no-such-queue/publish", json={"messages": [{"body": "a"}]}), 404, "queue_not_found")


def test_browse_pages_and_timestamps(api: httpx.Client, name: str) -> None:
    queue(api, name)
    publish(api, "amq.default", *({"body": str(i), "routing_key": name} for i in range(5)))
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    publish(api, "amq.default", *({"body": str(i), "routing_key": name} for i in range(5, 10)))
    page = ok(api.get(f"/api/v1/queues/{name}/messages", params={"offset": 3, "limit": 4}))
    assert [m["body"] for m in page["messages"]] == ["3", "4", "5", "6"]
    assert page["next_offset"] == 7
    page = ok(api.get(f"/api/v1/queues/{name}/messages", params={"timestamp": middle, "limit": 100}))
    assert [m["offset"] for m in page["messages"]] == [5, 6, 7, 8, 9]
    page = ok(api.get(f"/api/v1/queues/{name}/messages", params={"offset": 10}))
    assert page == {"messages": [], "next_offset": 10}


def test_bad_publish_bodies_get_400_and_store_nothing(api: httpx.Client, name: str) -> None:
    queue(api, name)
    url = "/api/v1/exchanges/amq.default/publish"
    cases = [
        b"not json",
        b"[]",
        b'{"messages": []}',
        b'{"messages": [{"routing_key": "x"}]}',
        b'{"messages": [{"body": 5}]}',
        b'{"messages": [{"body": "a", "body_base64": "AA=="}]}',
        b'{"messages": [{"body_base64": "***"}]}',
        b'{"messages": [{"body": "a", "headers": {"k": 1}}]}',
        b'{"messages": [{"body": "a", "colour": "red"}]}',
        b'{"messages": [{"body": "a"}], "mandatory": "yes"}',
        b'{"messages": [{"body": "a", "tag": ""}]}',
    ]
    for raw in cases:
        message = error(api.post(url, content=raw, headers={"content-type": "application/json"}), 400,
                        "invalid_body")
        assert "Traceback" not in message
    # A bad message anywhere in a batch rejects the whole batch.
    response = api.post(url, json={"messages": [{"body": "good", "routing_key": name}, {"body": None}]})
    error(response, 400, "invalid_body")
    assert bodies(api, name) == []
    error(api.post("/api/v1/exchanges/no-such/publish", json={"messages": [{"body": "a"}]}), 404, "exchange_not_found")
    error(api.post("/api/v1/exchanges/bad name!/publish", json={"messages": [{"body": "a"}]}), 400, "invalid_name")


def test_size_limits(api: httpx.Client, name: str) -> None:
    queue(api, name)
    big = "x" * (4 * 1024 * 1024 + 1)
    response = api.post("/api/v1/exchanges/amq.default/publish",
                        json={"messages": [{"body": big, "routing_key": name}]})
    error(response, 413, "message_too_large")
    assert bodies(api, name) == []
    # A plain batch (one routing key, no tags or keys) names the message too, and stores nothing.
    response = api.post("/api/v1/exchanges/amq.default/publish",
                        json={"messages": [{"body": "a", "routing_key": name}] * 2
                              + [{"body": big, "routing_key": name}]})
    error(response, 413, "message_too_large")
    assert "messages[2]" in response.json()["error"]["message"]
    assert bodies(api, name) == []


def test_reject_publish_refuses_the_whole_batch(api: httpx.Client, name: str) -> None:
    queue(api, name, max_messages=3, overflow="reject_publish")
    publish(api, "amq.default", *({"body": str(i), "routing_key": name} for i in range(2)))
    response = api.post("/api/v1/exchanges/amq.default/publish",
                        json={"messages": [{"body": "2", "routing_key": name}, {"body": "3", "routing_key": name}]})
    error(response, 429, "queue_full")
    assert bodies(api, name) == ["0", "1"]
    publish(api, "amq.default", {"body": "2", "routing_key": name})
    assert bodies(api, name) == ["0", "1", "2"]


def test_drop_head_keeps_the_newest(api: httpx.Client, name: str) -> None:
    queue(api, name, max_messages=3)
    publish(api, "amq.default", *({"body": str(i), "routing_key": name} for i in range(5)))
    info = ok(api.get(f"/api/v1/queues/{name}"))
    assert (info["first_offset"], info["next_offset"], info["messages"]) == (2, 5, 3)
    assert info["messages_dropped"] == 2
    assert bodies(api, name) == ["2", "3", "4"]


def test_drop_head_by_bytes(api: httpx.Client, name: str) -> None:
    queue(api, name, max_bytes=2000)
    publish(api, "amq.default", *({"body": "x" * 500, "routing_key": name} for _ in range(10)))
    info = ok(api.get(f"/api/v1/queues/{name}"))
    assert 0 < info["bytes"] <= 2000
    assert info["messages"] in (2, 3)
    assert info["next_offset"] == 10


def test_idempotent_publish(api: httpx.Client, name: str) -> None:
    queue(api, name)
    first = publish(api, "amq.default", {"body": "a", "routing_key": name, "idempotency_key": f"{name}-1"})
    again = publish(api, "amq.default",
                    {"body": "a", "routing_key": name, "idempotency_key": f"{name}-1"},
                    {"body": "b", "routing_key": name, "idempotency_key": f"{name}-2"},
                    {"body": "b", "routing_key": name, "idempotency_key": f"{name}-2"})
    assert again["results"][0] == {**first["results"][0], "duplicate": True}
    assert again["results"][1]["duplicate"] is False
    assert again["results"][2] == {**again["results"][1], "duplicate": True}
    assert bodies(api, name) == ["a", "b"]


def test_message_ids(api: httpx.Client, name: str) -> None:
    error(api.get("/api/v1/messages/zzz"), 404, "message_not_found")
    error(api.get("/api/v1/messages/00000000ffffffff"), 404, "message_not_found")
    queue(api, name)
    result = publish(api, "amq.default", {"body": "x", "routing_key": name})
    message = ok(api.get(f"/api/v1/messages/{result['results'][0]['id']}"))
    assert (message["queue"], message["offset"], message["body"]) == (name, 0, "x")


def test_publish_routes_answer_like_every_other_route(api: httpx.Client, name: str) -> None:
    """The publish routes are plain ASGI (app/api/publish.py): same error shapes, same OpenAPI."""
    queue(api, name)
    for url in ("/api/v1/exchanges/amq.default/publish", f"/api/v1/queues/{name}/publish"):
        error(api.get(url), 405, "method_not_allowed")
        error(api.post(url, content=b""), 400, "invalid_body")
    error(api.post("/api/v1/queues/no-such/publish", json={"messages": [{"body": "a"}]}), 404, "queue_not_found")
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/exchanges/{name}/publish", "/api/v1/queues/{name}/publish"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/PublishBody"}


def test_batch_byte_limit_with_and_without_content_length(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_MAX_BATCH_BYTES="4096").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            queue(api, "small")
            url = "/api/v1/queues/small/publish"
            raw = orjson.dumps({"messages": [{"body": "x" * 100} for _ in range(50)]})
            assert len(raw) > 4096
            error(api.post(url, content=raw, headers={"content-type": "application/json"}), 413, "batch_too_large")

            def chunked() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
                for i in range(0, len(raw), 1000):
                    yield raw[i : i + 1000]

            error(api.post(url, content=chunked()), 413, "batch_too_large")
            ok(api.post(url, json={"messages": [{"body": "fits"}]}))
            assert bodies(api, "small") == ["fits"]
    finally:
        server.stop()


def test_header_limits_and_nul_characters_get_400_naming_the_field(api: httpx.Client, name: str) -> None:
    queue(api, name)
    url = "/api/v1/exchanges/amq.default/publish"
    many = {f"h{i}": "v" for i in range(100_000)}
    message = error(api.post(url, json={"messages": [{"body": "x", "routing_key": name, "headers": many}]}),
                    400, "invalid_body")
    assert "messages[0].headers" in message and "100000" in message
    big = {"k": "v" * (64 * 1024)}
    message = error(api.post(url, json={"messages": [{"body": "x", "routing_key": name, "headers": big}]}),
                    400, "invalid_body")
    assert "messages[0].headers" in message and "bytes" in message
    nul = "a\u0000b"
    for field, member in [("routing_key", {"routing_key": nul}), ("headers", {"headers": {nul: "v"}}),
                          ("headers", {"headers": {"k": nul}}), ("tag", {"tag": nul}),
                          ("idempotency_key", {"idempotency_key": nul})]:
        batch = [{"body": "fine", "routing_key": name}, {"body": "x", "routing_key": name, **member}]
        message = error(api.post(url, json={"messages": batch}), 400, "invalid_body")
        assert f"messages[1].{field}" in message and "NUL" in message
    assert bodies(api, name) == []
    at_limit = {f"h{i}": "v" for i in range(64)}
    publish(api, "amq.default", {"body": "kept\u0000", "routing_key": name, "headers": at_limit})
    assert bodies(api, name) == ["kept\u0000"]


BATCH = {"content-type": "application/vnd.chunkmq.batch"}


def test_binary_batches_publish_and_pull_without_json(api: httpx.Client, name: str) -> None:
    queue(api, name)
    raw = bytes(range(256))
    body = binary_body((name.encode(), "héllo".encode(), 0), (name.encode(), raw, 1), (b"nowhere", b"lost", 0))
    result = ok(api.post("/api/v1/exchanges/amq.default/publish", content=body, headers=BATCH))
    assert [r["routed"] for r in result["results"]] == [
        [{"queue": name, "offset": 0}], [{"queue": name, "offset": 1}], []]
    ok(api.post(f"/api/v1/queues/{name}/publish", content=binary_body((b"", b"direct", 0)), headers=BATCH))
    text, binary, direct = browse(api, name)
    assert (text["body"], text["routing_key"], text["exchange"]) == ("héllo", name, "")
    assert base64.b64decode(binary["body_base64"]) == raw
    assert direct["body"] == "direct"
    # pulled back as a binary batch: the ids and bodies as published
    answer = api.post(f"/api/v1/queues/{name}/groups/g/pull", json={"max_messages": 10},
                      headers={"accept": "application/vnd.chunkmq.batch"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/vnd.chunkmq.batch"
    assert struct.unpack_from("<I", answer.content) == (3,)
    assert struct.unpack_from("<3Q", answer.content, 4) == (0, 1, 2)
    assert answer.content.endswith("héllo".encode() + raw + b"direct")


def test_a_binary_publish_can_be_answered_in_binary(api: httpx.Client, name: str) -> None:
    queue(api, name)
    answer = api.post(f"/api/v1/queues/{name}/publish", content=binary_body((b"", b"a", 0), (b"", b"b", 0)),
                      headers={**BATCH, "accept": "application/vnd.chunkmq.batch"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/vnd.chunkmq.batch"
    assert answer.headers["chunkmq-durability"] == "interval"
    ids = [int(m["id"], 16) for m in browse(api, name)]
    name_bytes = name.encode()
    assert answer.content == (struct.pack("<I2Q2H", 2, *ids, 1, 1) + struct.pack("<I2Q2B", 2, 0, 1, len(name_bytes),
                                                                                  len(name_bytes)) + name_bytes * 2)
    # a JSON body is answered in JSON whatever it accepts
    assert ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": [{"body": "c"}]},
                       headers={"accept": "application/vnd.chunkmq.batch"}))["results"][0]["routed"][0]["offset"] == 2


def test_binary_publish_mandatory_is_a_query_parameter(api: httpx.Client, name: str) -> None:
    queue(api, name)
    url = "/api/v1/exchanges/amq.default/publish"
    body = binary_body((b"no-such-queue", b"x", 0))
    error(api.post(url, params={"mandatory": "true"}, content=body, headers=BATCH), 422, "unroutable")
    error(api.post(url, params={"mandatory": "yes"}, content=body, headers=BATCH), 400, "invalid_request")
    assert ok(api.post(url, params={"mandatory": "false"}, content=body, headers=BATCH))["results"][0]["routed"] == []


def test_malformed_binary_bodies_get_400_and_store_nothing(api: httpx.Client, name: str) -> None:
    """Fuzz-ish: cuts and wild lengths of a valid body over HTTP are 400 or 413, never a 500, and a
    refused body stores nothing."""
    queue(api, name)
    url = f"/api/v1/queues/{name}/publish"
    valid = binary_body(*((b"", b"body %d" % i, 0) for i in range(10)))
    stored = 0
    for cut in [*range(0, len(valid), 7), len(valid) - 1]:
        error(api.post(url, content=valid[:cut], headers=BATCH), 400, "invalid_body")
    for at in range(0, 40, 3):
        for value in (0, 1, 11, 0xFFFF, 0xFFFFFFFF):
            body = bytearray(valid)
            body[at:at + 4] = struct.pack("<I", value)
            response = api.post(url, content=bytes(body), headers=BATCH)
            assert response.status_code in (200, 400, 413), response.text
            if response.status_code == 200:
                stored += len(response.json()["results"])
            else:
                assert response.json()["error"]["code"] in ("invalid_body", "batch_too_large")
    assert ok(api.get(f"/api/v1/queues/{name}"))["messages"] == stored
    error(api.post(url, content=struct.pack("<I", 10_001), headers=BATCH), 413, "batch_too_large")
    error(api.post(url, content=binary_body((b"", b"\xff", 0)), headers=BATCH), 400, "invalid_body")
