"""app/client/_batch.py: the client's binary batches. A publish body is read back with the server's
decoder; pull answers of the whole app (in this process) decode to the same messages as its JSON."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from chunkmq.client import _batch
from chunkmq.client import _calls as calls
from chunkmq.client.models import Message, OutgoingMessage
from chunkmq.wire.batch import BINARY, decode_publish
from tests.client.inprocess import answer, local_app, run


def _records(body: bytes) -> list[tuple[bytes, bytes, int]]:
    """(routing key, body, flags) of each record, as the server reads them."""
    cols = decode_publish(body, 10_000)
    out, key_at, body_at = [], cols.keys_start, cols.bodies_start
    for body_len, key_len, flag in zip(cols.body_lengths, cols.key_lengths, cols.flags, strict=True):
        out.append((body[key_at:key_at + key_len], body[body_at:body_at + body_len], flag))
        key_at += key_len
        body_at += body_len
    return out


@pytest.mark.parametrize("messages", [
    ["a", "bc", ""],  # ASCII text: one join, the lengths are the strings'
    ["é", "日本"],  # text, not ASCII: byte lengths
    ["t", b"\x00\xff", bytearray(b"ba"), memoryview(b"mv")],  # mixed: bytes are flagged binary
])
def test_a_publish_body_holds_each_message_with_the_default_key(messages: list[Any]) -> None:
    expected = [(b"key", m.encode() if isinstance(m, str) else bytes(m), 0 if isinstance(m, str) else BINARY)
                for m in messages]
    assert _records(_batch.encode(messages, "key")) == expected


def test_outgoing_messages_carry_their_own_key_unless_they_need_json() -> None:
    body = _batch.encode([OutgoingMessage("a", routing_key="own"), OutgoingMessage(b"b"), "c"], "default")
    assert _records(body) == [(b"own", b"a", 0), (b"default", b"b", BINARY), (b"default", b"c", 0)]
    for needs_json in (OutgoingMessage("x", headers={"h": "v"}), OutgoingMessage("x", tag="t"),
                       OutgoingMessage("x", idempotency_key="k")):
        assert _batch.encode_if_plain(["plain", needs_json]) is None
        with pytest.raises(ValueError, match="publish headers, tags, idempotency keys, ttl_ms and delays as JSON"):
            _batch.encode([needs_json])
    with pytest.raises(TypeError, match="cannot publish a dict"):
        _batch.encode([{"body": "x"}])  # type: ignore[list-item]


async def _fanout_to_group(app: Any) -> None:
    """Exchange e (fanout) into queue q, read by group g."""
    await run(app, calls.declare_exchange("e", "fanout", None))
    await run(app, calls.declare_queue("q", {}))
    await run(app, calls.bind("e", "q", "", None))
    await run(app, calls.declare_group("q", "g", "earliest", None))


def test_a_binary_pull_decodes_to_the_messages_the_json_pull_gives(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[Message], list[Message], Any]:
        async with local_app(tmp_path / "data") as app:
            await _fanout_to_group(app)
            messages = [OutgoingMessage("text", routing_key="k1", headers={"h": "v"}, tag="t"),
                        OutgoingMessage(b"\x00\x01", routing_key="k2"), OutgoingMessage("ünï", tag="t")]
            await run(app, calls.publish("e", messages, "", False, False))
            binary = await run(app, calls.pull("q", "g", 10, 0, "c", None, True))
            columns = await run(app, calls.pull_batch("q", "g", 10, 0, "c", None))  # nothing left
            await run(app, calls.seek("q", "g", "earliest", None, None))
            as_json = await run(app, calls.pull("q", "g", 10, 0, "c", None, False))
            return binary, as_json, columns

    binary, as_json, empty = asyncio.run(scenario())
    assert binary == as_json
    assert [m.body for m in binary] == ["text", b"\x00\x01", "ünï"]
    assert (len(empty), empty.next_offset, empty.messages()) == (0, None, [])


def test_published_reads_the_binary_answer_lazily(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, list[dict[str, Any]]]:
        async with local_app(tmp_path / "data") as app:
            await run(app, calls.declare_exchange("e", "fanout", None))
            for q in ("a", "b"):
                await run(app, calls.declare_queue(q, {}))
                await run(app, calls.bind("e", q, "", None))
            response = await answer(app, calls.publish("e", ["x", "y"], "", False, True))
            page = await run(app, calls.browse("a", 0, None, 10))
            return _batch.published(response), [{"id": m.id} for m in page.messages]

    published, ids = asyncio.run(scenario())
    assert len(published) == 2 and published.durability == "interval"
    assert [r.id for r in published.results] == [i["id"] for i in ids]  # the JSON ids, 16 hex digits
    assert [[(p.queue, p.offset) for p in r.routed] for r in published.results] == [
        [("a", 0), ("b", 0)], [("a", 1), ("b", 1)]]
    assert not any(r.duplicate for r in published.results)


def test_a_batch_of_one_decodes_as_the_columns_do(tmp_path: Path) -> None:
    """decode builds the one message of a batch of one (a stream's frame at low rates) without the
    columns: the same Message as decode_batch's, whatever the message holds."""
    async def scenario() -> list[bytes]:
        async with local_app(tmp_path / "data") as app:
            await _fanout_to_group(app)
            messages = [OutgoingMessage("text", routing_key="k1", headers={"h": "v"}, tag="t"),
                        OutgoingMessage(b"\x00\x01"), OutgoingMessage("ünï", routing_key="ké"), "plain"]
            await run(app, calls.publish("e", messages, "", False, False))
            await run(app, calls.publish("", ["default"], "q", False, True))  # the default exchange, binary
            pulls = [calls.pull("q", "g", 1, 0, "c", None, True) for _ in range(5)]
            return [(await answer(app, call)).content for call in pulls]

    batches = asyncio.run(scenario())
    one = [_batch.decode(b, "q") for b in batches]
    assert one == [_batch.decode_batch(b, "q").messages() for b in batches]
    assert [m.body for [m] in one] == ["text", b"\x00\x01", "ünï", "plain", "default"]
    assert [(m.tag, m.headers, m.routing_key, m.exchange) for [m] in one][:3] == [
        ("t", {"h": "v"}, "k1", "e"), (None, {}, "", "e"), (None, {}, "ké", "e")]
