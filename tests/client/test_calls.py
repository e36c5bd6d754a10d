"""app/client/_calls.py: every call described as data (method, target, body, parse), sent to the
whole app in this process: the paths, bodies and parsers agree with the server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from chunkmq.client import _calls as calls
from chunkmq.client.errors import InvalidRequest, NotFound, PreconditionFailed, Unroutable
from chunkmq.client.models import OutgoingMessage
from tests.client.inprocess import local_app, run


def test_the_rest_calls_round_trip_through_the_app(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with local_app(tmp_path / "data") as app:
            ex = await run(app, calls.declare_exchange("e", "topic", None))
            assert (ex.name, ex.type) == ("e", "topic")
            q = await run(app, calls.declare_queue("q", {"max_messages": 100}))
            assert (q.name, q.messages, q.raw["max_messages"]) == ("q", 0, 100)
            binding = await run(app, calls.bind("e", "q", "a.*", None))
            assert [b.id for b in await run(app, calls.list_bindings("e", None))] == [binding.id]
            assert await run(app, calls.list_bindings(None, "other")) == []
            await run(app, calls.declare_group("q", "g", "earliest", ["t1"]))
            published = await run(app, calls.publish("e", ["a", OutgoingMessage("b", tag="t1")], "a.x", False, None))
            assert len(published) == 2 and [r.routed[0].offset for r in published.results] == [0, 1]
            pulled = await run(app, calls.pull("q", "g", 10, 0, "c1", None, False))
            assert [m.body for m in pulled] == ["b"]  # the group's tag filter
            acked = await run(app, calls.ack("q", "g", None, 2))
            assert acked.ack_floor == 2
            page = await run(app, calls.browse("q", 1, None, 10))
            assert [m.body for m in page.messages] == ["b"] and page.next_offset == 2
            msg = await run(app, calls.get_message(page.messages[0].id))
            assert (msg.queue, msg.offset, msg.tag) == ("q", 1, "t1")
            group = await run(app, calls.seek("q", "g", "earliest", None, None))
            assert group.next_offset == 0
            updated = await run(app, calls.update_queue("q", {"consumer_visible": False}))
            assert updated.consumer_visible is False
            assert await run(app, calls.purge("q")) == 2
            assert await run(app, calls.delete_group("q", "g")) is None
            await run(app, calls.unbind(binding.id))
            await run(app, calls.delete_exchange("e", True))
            await run(app, calls.delete_queue("q", False))
            assert [x.name for x in await run(app, calls.list_queues())] == []
            for n in ("q1", "q2", "q3"):
                await run(app, calls.declare_queue(n, {}))
            assert [x.name for x in await run(app, calls.list_queues(2, None))] == ["q1", "q2"]
            assert [x.name for x in await run(app, calls.list_queues(None, "q1"))] == ["q2", "q3"]
            overview = await run(app, calls.overview())
            assert overview["durability"] == "interval" and overview["totals"]["queues"] == 3

    asyncio.run(scenario())


def test_binary_publish_and_pull_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with local_app(tmp_path / "data") as app:
            await run(app, calls.declare_queue("q", {}))
            await run(app, calls.declare_group("q", "g", "earliest", None))
            call = calls.publish_to_queue("q", ["text", b"\x00\xff"], False, None)
            assert call.batch is not None and call.content()[1] == {
                "content-type": "application/vnd.chunkmq.batch", "accept": "application/vnd.chunkmq.batch"}
            published = await run(app, call)
            assert published.durability and [r.routed[0].offset for r in published.results] == [0, 1]
            batch = await run(app, calls.pull_batch("q", "g", 10, 0, "c", None))
            assert batch.bodies == ["text", b"\x00\xff"] and batch.next_offset == 2
            again = await run(app, calls.seek("q", "g", None, 0, None))
            assert again.next_offset == 0
            messages = await run(app, calls.pull("q", "g", 10, 0, "c", None, True))
            assert [m.body for m in messages] == ["text", b"\x00\xff"]

    asyncio.run(scenario())


def test_server_errors_become_the_clients_typed_errors(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with local_app(tmp_path / "data") as app:
            with pytest.raises(NotFound) as missing:
                await run(app, calls.get_queue("nope"))
            assert (missing.value.code, missing.value.status) == ("queue_not_found", 404)
            await run(app, calls.declare_queue("q", {"max_messages": 1}))
            with pytest.raises(PreconditionFailed):
                await run(app, calls.declare_queue("q", {"max_messages": 2}))
            with pytest.raises(InvalidRequest) as bad:
                await run(app, calls.declare_queue("bad name", {}))
            assert bad.value.code == "invalid_name"
            await run(app, calls.declare_exchange("e", "direct", None))
            with pytest.raises(Unroutable):
                await run(app, calls.publish("e", ["x"], "nowhere", True, None))
            with pytest.raises(Unroutable):
                await run(app, calls.publish("e", ["x"], "nowhere", True, False))  # the JSON body too

    asyncio.run(scenario())


def test_the_default_exchange_is_amq_default_in_urls() -> None:
    assert calls.get_exchange("").target == "/api/v1/exchanges/amq.default"
    assert calls.publish("", ["x"], "q", False, False).path == "/api/v1/exchanges/amq.default/publish"


def test_a_call_says_what_its_body_is() -> None:
    assert calls.get_queue("q").content() == (None, None)
    body, headers = calls.declare_queue("q", {"max_messages": 5}).content()
    assert (body, headers) == (b'{"max_messages":5}', {"content-type": "application/json"})
    assert calls.delete_queue("q", True).target == "/api/v1/queues/q?force=true"
    assert calls.browse("q", None, 123, 5).target == "/api/v1/queues/q/messages?limit=5&timestamp=123"
    pull = calls.pull("q", "g", 10, 2500, "c", 7, False)
    assert pull.extra_seconds == 2.5 and pull.body["ack"] == {"up_to": 7}


@pytest.mark.parametrize(("make", "error"), [
    (lambda: calls.ack("q", "g", None, None), "give offsets or up_to"),
    (lambda: calls.ack("q", "g", [1], 2), "give offsets or up_to"),
    (lambda: calls.seek("q", "g", "earliest", 5, None), "exactly one of"),
    (lambda: calls.seek("q", "g", None, None, None), "exactly one of"),
])
def test_calls_that_cannot_be_sent_are_value_errors(make: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        make()


def test_what_is_published() -> None:
    assert calls.to_publish(None, {"a": 1}) == '{"a":1}'
    with pytest.raises(TypeError, match="not both"):
        calls.to_publish(["x"], {"a": 1})
    with pytest.raises(TypeError, match="give the messages"):
        calls.to_publish(None, calls.NO_JSON)
    assert calls.encode_messages("one", "k") == [{"body": "one", "routing_key": "k"}]  # one str is one message
    assert calls.encode_messages([b"\x01"]) == [{"body_base64": "AQ==", "routing_key": ""}]
    with pytest.raises(TypeError, match="a dict is not a message"):
        calls.encode_messages({"body": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot publish a int"):
        calls.encode_messages([5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="give one message or a list"):
        calls.encode_messages(iter(["x"]))
    with pytest.raises(TypeError, match="non-empty list"):
        calls.publish("", [], "q", False, True)


def test_url_and_token_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHUNKMQ_URL", raising=False)
    monkeypatch.delenv("CHUNKMQ_TOKEN", raising=False)
    assert (calls.default_url(None), calls.default_token(None)) == ("http://127.0.0.1:8000", None)
    monkeypatch.setenv("CHUNKMQ_URL", "http://mq:9000/")
    monkeypatch.setenv("CHUNKMQ_TOKEN", "t")
    assert (calls.default_url(None), calls.default_token(None)) == ("http://mq:9000", "t")
    assert (calls.default_url("http://given/"), calls.default_token("")) == ("http://given", "")
