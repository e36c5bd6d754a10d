"""The stored blob of a message: the fast path and the general path must store the same members."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.broker.broker import Broker
from app.broker.errors import InvalidInput
from app.broker.message import (
    MessageLimits,
    _parse_any,
    blob_fields,
    decode_data,
    encode_blob,
    parse_batch,
    parse_message,
    render,
)
from app.config import Settings
from app.meta import MetaStore, upgrade

LIMITS = MessageLimits(max_headers=64, max_header_bytes=64 * 1024)

SHAPES: list[dict[str, Any]] = [
    {"body": "plain"},
    {"body": 'quote " backslash \\ newline \n ünï'},
    {"body": "x", "routing_key": "orders.eu"},
    {"routing_key": "k", "body": ""},
    {"body": "x", "tag": "t"},
    {"body": "x", "headers": {"a": "b"}, "routing_key": "r", "tag": "t", "idempotency_key": "i"},
    {"body_base64": "AAEC"},
]


@pytest.mark.parametrize("exchange", ["ex", ""])
@pytest.mark.parametrize("raw", SHAPES)
def test_fast_and_general_paths_store_the_same_members(raw: dict[str, Any], exchange: str) -> None:
    fast, general = parse_message(raw, exchange, 0, LIMITS), _parse_any(raw, exchange, 0, LIMITS)
    assert fast.data == general.data
    assert (fast.routing_key, fast.headers, fast.tag, fast.flags) == (
        general.routing_key, general.headers, general.tag, general.flags)
    tag = fast.tag.encode() if fast.tag else b""
    members = decode_data(fast.data, tag)
    expected = {"exchange": exchange, "routing_key": raw.get("routing_key", ""), "headers": raw.get("headers", {}),
                "tag": raw.get("tag")} | ({"body_base64": raw["body_base64"]} if "body_base64" in raw else {"body": raw["body"]})
    assert members == expected
    rendered = render(b'"q"', 7, 0x2A, 1, tag, fast.data, 1)
    assert rendered.startswith(b'{"queue":"q","offset":7,"id":"000000000000002a"')
    assert orjson.loads(rendered) == {"queue": "q", "offset": 7, "id": "000000000000002a", "timestamp": 1,
                                      **expected, "delivery_count": 1}


def test_the_blob_leaves_out_what_is_empty() -> None:
    """A 100-byte text body with a 9-character routing key on the default exchange: 111 bytes (head,
    key length, key, body); the JSON members of the older layout took 187."""
    plain = parse_message({"body": "x" * 100, "routing_key": "orders.eu"}, "", 0, LIMITS).data
    assert plain == b"\x82\x09orders.eu" + b"x" * 100
    assert len(parse_message({"body": "x" * 100, "routing_key": "orders.eu"}, "orders", 0, LIMITS).data) == 118
    assert parse_message({"body": "x"}, "", 0, LIMITS).data == b"\x80x"
    binary = parse_message({"body_base64": "AAEC"}, "", 0, LIMITS).data
    assert binary == b"\x88\x00\x01\x02"  # raw bytes, base64 again on delivery


@pytest.mark.parametrize("size", [0, 254, 255, 65_000])
def test_blob_fields_round_trip(size: int) -> None:
    exchange, key, headers = b"e" * size, b"k" * min(size, 300), b'{"h":"%b"}' % (b"v" * size)
    blob = encode_blob(exchange, key, headers, b"body", False)
    assert blob_fields(blob) == (exchange, key, headers, b"body", False)
    assert blob_fields(encode_blob(b"", b"", None, b"\x00\xff", True)) == (b"", b"", None, b"\x00\xff", True)


@pytest.mark.parametrize(
    "raw",
    [{"body": "x", "routing_key": 5}, {"body": "x", "routing_key": "k" * 256}, {"body": "x", "colour": "red"},
     {"body": 5}, {"routing_key": "k"}, "text", {"body": "x", "body_base64": "AA=="}],
)
def test_bad_shapes_are_refused_on_either_path(raw: Any) -> None:
    with pytest.raises(InvalidInput):
        parse_message(raw, "ex", 0, LIMITS)


def _refused(raw: dict[str, Any], limits: MessageLimits = LIMITS) -> str:
    """The message of the 400 for the second message of a batch (so the index is checked too)."""
    with pytest.raises(InvalidInput) as info:
        parse_batch([{"body": "ok"}, raw], "ex", limits)
    return info.value.message


def test_header_count_is_bounded() -> None:
    headers = {f"h{i}": "v" for i in range(100_000)}
    assert "messages[1].headers has 100000 entries; at most 64" in _refused({"body": "x", "headers": headers})
    at_limit = {f"h{i}": "v" for i in range(64)}
    assert parse_message({"body": "x", "headers": at_limit}, "ex", 0, LIMITS).headers == at_limit
    assert "has 65 entries" in _refused({"body": "x", "headers": {**at_limit, "a": "b"}})


def test_header_bytes_are_bounded_in_utf8_bytes() -> None:
    limits = MessageLimits(max_headers=64, max_header_bytes=8)
    assert parse_message({"body": "x", "headers": {"ab": "cdefgh"}}, "ex", 0, limits).headers == {"ab": "cdefgh"}
    message = _refused({"body": "x", "headers": {"ab": "cdefghi"}}, limits)
    assert "messages[1].headers hold more than 8 bytes" in message
    _refused({"body": "x", "headers": {"a": "€€€"}}, limits)  # 10 bytes in 4 characters
    big = {"k": "v" * (64 * 1024)}
    assert "bytes" in _refused({"body": "x", "headers": big})


@pytest.mark.parametrize("field", ["routing_key", "header name", "header value", "tag", "idempotency_key"])
@pytest.mark.parametrize("plain", [True, False])
def test_nul_is_refused_in_every_named_field(field: str, plain: bool) -> None:
    raw: dict[str, Any] = {"body": "a\0body may hold NUL"}
    if not plain:  # the general path, with every field present
        raw |= {"routing_key": "r", "headers": {"k": "v"}, "tag": "t", "idempotency_key": "i"}
    if field == "header name":
        raw["headers"] = {"bad\0name": "v"}
    elif field == "header value":
        raw["headers"] = {"k": "bad\0value"}
    else:
        raw[field] = "bad\0value"
    name = "headers" if field.startswith("header") else field
    message = _refused(raw)
    assert f"messages[1].{name}" in message and "NUL" in message


def test_nul_in_a_body_is_kept() -> None:
    assert decode_data(parse_message({"body": "a\0b"}, "ex", 0, LIMITS).data)["body"] == "a\0b"


FORMAT1 = Path(__file__).parent.parent / "fixtures" / "format1"


def test_messages_stored_in_the_older_layout_are_delivered_as_before(tmp_path: Path) -> None:
    """tests/fixtures/format1: a data directory written in record format 1 with JSON-member blobs;
    browse delivers every message as it did then, and new messages next to them."""
    data_dir = shutil.copytree(FORMAT1 / "broker_dir", tmp_path / "data")
    expected = orjson.loads((FORMAT1 / "expected.json").read_bytes())
    s = Settings(data_dir=data_dir, chunk_size=8192, index_chunk_entries=64)
    upgrade(s.meta_url)

    async def run() -> None:
        meta = MetaStore(s.meta_url)
        broker = Broker.open(s, meta)
        try:
            for queue in ("plain", "a", "b"):
                assert orjson.loads(broker.browse(queue, 0, None, 1000)) == expected[queue]
            await broker.publish("fan", [{"body": "new", "tag": "t"}])
            page = orjson.loads(broker.browse("a", 0, None, 1000))["messages"]
            assert page[:-1] == expected["a"]["messages"]
            assert (page[-1]["body"], page[-1]["exchange"], page[-1]["tag"]) == ("new", "fan", "t")
            first = expected["plain"]["messages"][0]
            assert orjson.loads(broker.get_message(first["id"])[1]) == first
        finally:
            broker.close()
            meta.close()

    asyncio.run(run())
