"""The stored blob of a message: the fast path and the general path must store the same members."""

from __future__ import annotations

import asyncio
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput, TooLarge
from chunkmq.broker.message import (
    FLAG_BINARY,
    MessageLimits,
    _parse_any,
    decode_data,
    parse_batch,
    parse_binary_batch,
    parse_message,
    plain_message,
    render,
    render_binary,
    render_one,
    render_results,
)
from chunkmq.client import _batch
from chunkmq.config import Settings
from chunkmq.meta import MetaStore, upgrade
from chunkmq.storage import AppendedBatch

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
    body = {"body_base64": raw["body_base64"]} if "body_base64" in raw else {"body": raw["body"]}
    expected = {"exchange": exchange, "routing_key": raw.get("routing_key", ""), "headers": raw.get("headers", {}),
                "tag": raw.get("tag")} | body
    assert members == expected
    rendered = render(b'"q"', 7, 0x2A, 1, tag, fast.data, 1)
    assert rendered.startswith(b'{"queue":"q","offset":7,"id":"000000000000002a"')
    assert orjson.loads(rendered) == {"queue": "q", "offset": 7, "id": "000000000000002a", "timestamp": 1,
                                      **expected, "delivery_count": 1}


@pytest.mark.parametrize("exchange", ["ex", ""])
@pytest.mark.parametrize("raw", [*SHAPES, {"body": "x", "routing_key": "k" * 256}, {"body": "x", "routing_key": "a\0"},
                                 {"body": 5}, {"body": "x", "routing_key": 5}, {"routing_key": "k"}, "body", [],
                                 {"body": "x", "extra": 1}])
def test_a_lone_plain_message_is_what_parse_batch_stores(raw: Any, exchange: str) -> None:
    """plain_message (a single-message publish) answers the routing key and blob parse_batch stores for a
    plain message, and None for any other, which parse_batch then validates."""
    plain = plain_message(raw, exchange)
    if plain is None:
        assert not (type(raw) is dict and type(raw.get("body")) is str and set(raw) <= {"body", "routing_key"}
                    and type(raw.get("routing_key", "")) is str and len(raw.get("routing_key", "")) <= 255
                    and "\0" not in raw.get("routing_key", ""))
        return
    batch = parse_batch([raw], exchange, LIMITS)
    assert not batch.full and plain == (batch.routing_keys[0], batch.blobs[0])


def test_the_blob_leaves_out_what_is_empty() -> None:
    """A 100-byte text body with a 9-character routing key on the default exchange: 111 bytes (head,
    key length, key, body); the JSON members of the older layout took 187."""
    plain = parse_message({"body": "x" * 100, "routing_key": "orders.eu"}, "", 0, LIMITS).data
    assert plain == b"\x82\x09orders.eu" + b"x" * 100
    assert len(parse_message({"body": "x" * 100, "routing_key": "orders.eu"}, "orders", 0, LIMITS).data) == 118
    assert parse_message({"body": "x"}, "", 0, LIMITS).data == b"\x80x"
    binary = parse_message({"body_base64": "AAEC"}, "", 0, LIMITS).data
    assert binary == b"\x88\x00\x01\x02"  # raw bytes, base64 again on delivery


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
# ---------------------------------------------------------------------------- binary batches

def binary_body(*records: tuple[bytes, bytes, int]) -> bytes:
    """A binary publish body of (routing key, body, flags) records, laid out as docs/api.md says:
    the count, the columns (body length u32, key length u16, flags u8), the keys, the bodies."""
    n = len(records)
    return (struct.pack("<I", n) + struct.pack(f"<{n}I", *(len(b) for _, b, _ in records))
            + struct.pack(f"<{n}H", *(len(k) for k, _, _ in records)) + bytes(f for _, _, f in records)
            + b"".join(k for k, _, _ in records) + b"".join(b for _, b, _ in records))


def test_the_example_of_docs_api_md_parses() -> None:
    example = bytes.fromhex("01000000 02000000 0100 00 6b 6869")  # docs/api.md, Binary batches
    assert example == binary_body((b"k", b"hi", 0))
    batch = parse_binary_batch(example, "", 10)
    assert batch.routing_keys == ["k"] and decode_data(batch.blobs[0])["body"] == "hi"


def test_binary_records_store_what_the_json_messages_store() -> None:
    texts = ["plain", 'quote " backslash \\ newline \n ünï', "", "a\0b"]
    keys = ["", "orders.eu", "ü", "orders.eu"]
    rows = ((k.encode(), t.encode(), 0) for k, t in zip(keys, texts, strict=True))
    batch = parse_binary_batch(binary_body(*rows), "ex", 100)
    same = parse_batch([{"body": t, "routing_key": k} for k, t in zip(keys, texts, strict=True)], "ex", LIMITS)
    assert batch.routing_keys == same.routing_keys == keys
    assert batch.blobs == same.blobs  # byte for byte: escapes only where JSON needs them
    assert batch.full == {}
    ascii_only = parse_binary_batch(binary_body((b"k", b"plain ascii", 0)), "ex", 100)
    assert ascii_only.blobs == parse_batch([{"body": "plain ascii", "routing_key": "k"}], "ex", LIMITS).blobs


@pytest.mark.parametrize("bodies", [
    [b"plain", b"more"],  # the fast path: ASCII without escapes, cut by slicing
    [b'quote " backslash \\ tab \t', "ünï".encode(), b"x"],  # escaped and unescaped
    [b"\0\xff", b"text"],  # a binary body among text ones
])
def test_published_records_come_back_as_published(bodies: list[bytes]) -> None:
    """parse_binary_batch, then render_binary over the stored blobs, decoded by the client."""
    flags = [1 if b == b"\0\xff" else 0 for b in bodies]
    records = [(b"r\"k" if i % 2 else b"", b, f) for i, (b, f) in enumerate(zip(bodies, flags, strict=True))]
    batch = parse_binary_batch(binary_body(*records), "ex", 100)
    out = render_binary([(i, i, 1, b"", blob, 1) for i, blob in enumerate(batch.blobs)])
    messages = _batch.decode(out, "q")
    assert [(m.routing_key, m.exchange, m.data) for m in messages] == [(k.decode(), "ex", b) for k, b, _ in records]
    assert [isinstance(m.body, bytes) for m in messages] == [bool(f) for f in flags]


def test_a_binary_flagged_body_is_stored_as_bytes() -> None:
    raw = bytes(range(256))
    batch = parse_binary_batch(binary_body((b"k", b"text", 0), (b"k", raw, 1)), "", 100)
    assert decode_data(batch.blobs[0])["body"] == "text"
    assert batch.full[1].flags == FLAG_BINARY
    assert decode_data(batch.blobs[1]) == decode_data(parse_message(
        {"body_base64": __import__("base64").b64encode(raw).decode(), "routing_key": "k"}, "", 0, LIMITS).data)


@pytest.mark.parametrize(("body", "problem"), [
    (b"", "record count"),
    (b"\x01\x00", "record count"),
    (struct.pack("<I", 0), "at least one record"),
    (struct.pack("<I", 3) + b"\0" * 7, "columns are truncated"),
    (binary_body((b"", b"abc", 0))[:-1], "add up to 3 bytes, but 2 follow"),  # a truncated record
    (binary_body((b"", b"abc", 0)) + b"x", "add up to 3 bytes, but 4 follow"),  # bytes after the last
    (binary_body((b"", b"a", 0), (b"", b"b", 4)), "record 1 has unknown flags"),
    (binary_body((b"\xff", b"a", 0)), "record 0: the routing key is not UTF-8"),
    (binary_body((b"ok", b"a", 0), (b"a\0", b"b", 0)), "record 1: the routing key must be at most 255"),
    (binary_body((b"k" * 256, b"a", 0)), "at most 255 characters"),
    (binary_body((b"", b"a", 0), (b"", b"\xc3", 0)), "record 1: a text body must be UTF-8"),
])
def test_malformed_binary_bodies_are_refused(body: bytes, problem: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_binary_batch(body, "ex", 100)
    assert problem in info.value.message


def test_a_routing_key_of_255_characters_fits_in_more_bytes() -> None:
    key = "ü" * 255  # 510 bytes: the length column counts bytes
    assert parse_binary_batch(binary_body((key.encode(), b"a", 0)), "", 100).routing_keys == [key]


def test_too_many_records_are_refused_before_reading_them() -> None:
    with pytest.raises(TooLarge) as info:
        parse_binary_batch(struct.pack("<I", 101), "ex", 100)
    assert info.value.code == "batch_too_large"


def test_mangled_binary_bodies_are_refused_or_parsed_never_anything_else() -> None:
    """Fuzz: random cuts, flips and lengths of a valid body raise InvalidInput or TooLarge, or parse
    into as many messages as the count says."""
    rng = random.Random(17)
    valid = binary_body(*((b"key.%d" % i, b"body %d" % i, i % 2) for i in range(20)))
    for _ in range(2000):
        body = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            if not body:
                break
            at, kind = rng.randrange(len(body)), rng.randrange(3)
            if kind == 0:  # a flipped byte
                body[at] = rng.randrange(256)
            elif kind == 1:  # a cut
                del body[at:]
            else:  # a wild length in the count or the columns
                at = min(at, 60)
                body[at:at + 4] = struct.pack("<I", rng.randrange(1 << 32))
        try:
            batch = parse_binary_batch(bytes(body), "ex", 100)
        except (InvalidInput, TooLarge):
            continue
        assert len(batch.blobs) == struct.unpack_from("<I", body)[0]


def test_render_binary_gives_every_delivered_field() -> None:
    """Columns and regions as docs/api.md lays them out, for a text message and a binary one."""
    text = _parse_any({"body": "héllo", "routing_key": "r", "headers": {"a": "b"}, "tag": "t"}, "ex", 0, LIMITS)
    raw = _parse_any({"body_base64": "AAE=", "routing_key": ""}, "", 1, LIMITS)
    out = render_binary([(7, 0x2A, 1000, b"t", text.data, 1), (8, 0x50, 1001, b"", raw.data, 3)])
    assert struct.unpack_from("<I", out) == (2,)
    columns = struct.unpack_from("<2Q2Q2Q2I2B2B2H2H2I2I", out, 4)
    assert columns == (7, 8, 0x2A, 0x50, 1000, 1001, 1, 3, 0, 1, 2, 0, 1, 0, 1, 0, 9, 0, len("héllo".encode()), 2)
    regions = out[4 + 2 * (8 + 8 + 8 + 4 + 1 + 1 + 2 + 2 + 4 + 4):]
    headers = orjson.dumps({"a": "b"})
    assert regions == b"ex" + b"r" + b"t" + headers + "héllo".encode() + b"\0\1"
    assert render_binary([]) == struct.pack("<I", 0)


def test_render_results_gives_ids_and_placements() -> None:
    appended = AppendedBatch(0, [0x10, 0x20, 0x30], [1, 1, 2], [5, 6, 0], [1, 2, 0])
    out = render_results(appended, {1: b"q1", 2: b"queue2"})
    assert out == (struct.pack("<I3Q3H", 3, 0x10, 0x20, 0x30, 1, 2, 0)
                   + struct.pack("<I3Q3B", 3, 5, 6, 0, 2, 2, 6) + b"q1q1queue2")
    one = render_results(AppendedBatch(0, [0x10, 0x20], [1, 1], [5, 6]), {1: b"q1"})
    assert one == struct.pack("<I2Q2H", 2, 0x10, 0x20, 1, 1) + struct.pack("<I2Q2B", 2, 5, 6, 2, 2) + b"q1q1"


def test_render_binary_reads_records_of_the_older_json_members_form() -> None:
    old = b'"exchange":"ex","routing_key":"k","headers":{"a":"b"},"tag":"t","body":"hi"'
    (message,) = _batch.decode(render_binary([(3, 4, 5, b"t", old, 2)]), "q")
    assert (message.exchange, message.routing_key, message.headers, message.tag, message.body) == (
        "ex", "k", {"a": "b"}, "t", "hi")


@pytest.mark.parametrize("key", [b"", b"orders.eu"])
def test_render_binary_cuts_plain_blobs_of_one_shape(key: bytes) -> None:
    """A batch of text messages without headers, all with or all without a routing key."""
    batch = parse_binary_batch(binary_body((key, b"one", 0), (key, b'two "quoted"', 0)), "", 100)
    messages = _batch.decode(render_binary([(i, i, 1, b"", blob, 1) for i, blob in enumerate(batch.blobs)]), "q")
    assert [(m.routing_key, m.body) for m in messages] == [(key.decode(), "one"), (key.decode(), 'two "quoted"')]


def test_render_one_packs_what_render_binary_renders_for_one_message() -> None:
    """The one-row batch of a stream's single delivery, byte for byte render_binary's; None (the
    generic path's turn) for a blob it does not cut: headers, an exchange, escapes, binary, a long key."""
    plain = [parse_binary_batch(binary_body((key, body, 0)), "", 100).blobs[0]
             for key in (b"", b"orders.eu", "ké".encode()) for body in (b"one", "ünï".encode(), b"")]
    for i, blob in enumerate(plain):
        row = (i, 0x2A + i, 1000 + i, b"t" if i % 2 else b"", blob, 1 + i)
        assert render_one(*row) == render_binary([row])
    others = [parse_binary_batch(binary_body((b"k", b'say "hi"', 0)), "", 100).blobs[0],
              parse_binary_batch(binary_body((b"k", b"\0\1", FLAG_BINARY)), "", 100).blobs[0],
              parse_binary_batch(binary_body((("é" * 200).encode(), b"x", 0)), "", 1000).blobs[0],
              _parse_any({"body": "x", "headers": {"a": "b"}}, "", 0, LIMITS).data,
              _parse_any({"body": "x", "routing_key": "r"}, "ex", 0, LIMITS).data]
    for blob in others:
        assert render_one(1, 2, 3, b"", blob, 1) is None
        assert _batch.decode(render_binary([(1, 2, 3, b"", blob, 1)]), "q")  # the generic path renders it
