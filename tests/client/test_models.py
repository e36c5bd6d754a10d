"""app/client/models.py: what a caller builds (OutgoingMessage) and what the API's JSON becomes,
including the lazily built parts of batch answers."""

from __future__ import annotations

from typing import Any

import pytest

from chunkmq.client.models import (
    AckResult,
    BindingInfo,
    GroupInfo,
    Message,
    NackResult,
    OutgoingMessage,
    Published,
    PublishResult,
    PulledBatch,
    QueueInfo,
    json_text,
)


def test_an_outgoing_message_in_the_apis_shape() -> None:
    assert OutgoingMessage("hi").to_json("default") == {"routing_key": "default", "body": "hi"}
    full = OutgoingMessage(b"\x00\x01", routing_key="own", headers={"h": "v"}, tag="t", idempotency_key="k")
    assert full.to_json("default") == {"routing_key": "own", "body_base64": "AAE=", "headers": {"h": "v"},
                                       "tag": "t", "idempotency_key": "k"}
    assert OutgoingMessage("x", routing_key="").to_json("default")["routing_key"] == ""  # "" is a key, not unset


def test_json_messages_are_compact_text_and_exclusive_with_a_body() -> None:
    assert OutgoingMessage(json={"b": [1, None]}).body == '{"b":[1,null]}'
    assert OutgoingMessage(json=None).body == "null"  # the JSON value null, not "no json"
    with pytest.raises(ValueError, match="a body or json, not both"):
        OutgoingMessage("x", json=1)
    with pytest.raises(TypeError, match="cannot publish as JSON"):
        json_text({1j})


def test_a_delivered_message_from_json() -> None:
    text = Message.from_json({"queue": "q", "offset": 3, "id": "00ff", "timestamp": 5, "body": '{"a":1}'})
    assert (text.routing_key, text.exchange, text.headers, text.tag, text.delivery_count) == ("", "", {}, None, 0)
    assert text.data == b'{"a":1}' and text.json() == {"a": 1}
    binary = Message.from_json({"queue": "q", "offset": 4, "id": "01", "timestamp": 5, "body_base64": "/wA=",
                                "headers": {"h": "v"}, "tag": "t", "delivery_count": 2})
    assert binary.body == b"\xff\x00" and binary.data == b"\xff\x00" and binary.delivery_count == 2
    with pytest.raises(ValueError):
        binary.json()


def test_a_pulled_batch_builds_ids_and_headers_once_on_first_use() -> None:
    built: list[str] = []

    def ids() -> list[str]:
        built.append("ids")
        return ["a", "b"]

    def headers() -> list[dict[str, str]]:
        built.append("headers")
        return [{}, {"h": "v"}]

    batch = PulledBatch("q", [7, 8], ids, [1, 2], ["k", "k"], ["e", "e"], headers, [None, "t"], ["x", b"y"], [1, 1])
    assert len(batch) == 2 and batch.next_offset == 9 and built == []
    [first, second] = batch.messages()
    assert first == Message("q", 7, "a", 1, "k", "e", {}, None, "x", 1)
    assert (second.headers, second.tag, second.body) == ({"h": "v"}, "t", b"y")
    assert batch.ids == ["a", "b"] and batch.messages()[1].id == "b"
    assert built == ["ids", "headers"]  # once each
    empty = PulledBatch("q", [], list, [], [], [], list, [], [], [])
    assert (len(empty), empty.next_offset, empty.messages()) == (0, None, [])


def test_published_counts_without_building_its_results() -> None:
    raw = [{"id": "01", "routed": [{"queue": "q", "offset": 0}], "duplicate": False},
           {"id": "02", "routed": [], "duplicate": True}]
    published = Published.from_json({"results": raw, "durability": "fsync"})
    assert len(published) == 2 and published._results is None
    assert published.results[1] == PublishResult("02", [], True)
    assert published == Published([PublishResult.from_json(r) for r in raw], "fsync")
    assert published != Published(published.results, "none")
    assert "durability='fsync'" in repr(published)
    assert len(Published(None, "none")) == 0 and Published(None, "none").results == []


def test_infos_keep_the_whole_object_and_default_what_older_servers_leave_out() -> None:
    group: dict[str, Any] = {"name": "g", "ack_floor": 1, "next_offset": 4, "lag": 3, "in_flight": 2,
                             "consumers": [{"id": "c1", "credit": 5}], "tag_filter": None, "added_later": 1}
    queue: dict[str, Any] = {"name": "q", "first_offset": 0, "next_offset": 4, "messages": 4, "bytes": 40,
                             "producer_visible": True, "consumer_visible": False, "groups": [group]}
    info = QueueInfo.from_json(queue)
    assert info.groups == [GroupInfo.from_json(group)] and info.groups[0].consumers == ["c1"]
    assert info.groups[0].raw["added_later"] == 1 and info.raw is queue
    assert QueueInfo.from_json({**queue, "groups": []}).groups == []
    binding = {"id": 1, "exchange": "e", "queue": "q", "routing_key": "", "arguments": None}
    assert BindingInfo.from_json(binding).arguments == {}
    assert AckResult.from_json({"ack_floor": 3}) == AckResult(3, 0, [])
    assert NackResult.from_json({"ack_floor": 3, "exhausted": 1}) == NackResult(3, 0, [], 1)
