"""Arrow pages: the vector decoder gives what orjson gives, for every shape a message can take."""

from __future__ import annotations

import binascii

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkmq.broker import arrow
from chunkmq.broker.message import FLAG_BINARY, MessageLimits, decode_data, parse_batch
from chunkmq.storage.model import ColumnPage

_text = st.text(st.characters(codec="utf-8"), max_size=40)
_key = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
_routing_key = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)  # NUL is refused
_base64 = st.binary(max_size=30).map(lambda b: binascii.b2a_base64(b, newline=False).decode())
_message = st.fixed_dictionaries(
    {"body": _text},
    optional={"routing_key": _routing_key, "tag": _key, "headers": st.dictionaries(_key, _routing_key, max_size=3)},
) | st.fixed_dictionaries({"body_base64": _base64}, optional={"routing_key": _routing_key})


def _stored(messages: list[dict[str, object]], exchange: str = "ex") -> list[tuple[int, int, int, int, bytes, bytes]]:
    batch = parse_batch(messages, exchange, MessageLimits(64, 65536))
    rows = []
    for i in range(len(messages)):
        out = batch.full.get(i)
        data, flags = (out.data, out.flags) if out else (batch.blobs[i], 0)
        tag = out.tag.encode() if out and out.tag else b""
        rows.append((i + 5, 4096 * i + 255, 1_732_150_000_123 + i, flags, tag, data))
    return rows


def _expected(row: tuple[int, int, int, int, bytes, bytes]) -> dict[str, object]:
    m = decode_data(row[5], row[4])
    body = binascii.a2b_base64(m["body_base64"]) if row[3] & FLAG_BINARY else m["body"].encode()
    return {"offset": row[0], "id": f"{row[1]:016x}", "exchange": m["exchange"], "routing_key": m["routing_key"],
            "tag": m["tag"], "headers": sorted((m["headers"] or {}).items()), "body": body}


@settings(max_examples=150, deadline=None)
@given(st.lists(_message, min_size=1, max_size=30))
def test_vector_decoder_matches_orjson(messages: list[dict[str, object]]) -> None:
    stored = _stored(messages)
    got = arrow.record_batch("q.1", stored, arrow.schema()).to_pylist()
    assert pa.ipc.open_stream(arrow.ipc_stream("q.1", stored)).read_all().to_pylist() == got
    for row, out in zip(stored, got, strict=True):
        assert out["queue"] == "q.1"
        assert int(out["timestamp"].timestamp() * 1000) == row[2]
        out = {k: v for k, v in out.items() if k not in ("queue", "timestamp")}
        out["headers"] = sorted(out["headers"])
        assert out == _expected(row)


def test_blobs_of_the_older_layout_are_decoded_too() -> None:
    """Records of format-1 stores hold the JSON members themselves (message.py)."""
    old = b'"exchange":"ex","routing_key":"k\\"q","headers":{"h":"v"},"tag":"t","body":"caf\xc3\xa9"'
    stored = [*_stored([{"body": "new", "routing_key": "k"}]), (9, 512, 1_732_150_000_000, 0, b"t", old)]
    got = arrow.record_batch("q", stored, arrow.schema()).to_pylist()
    assert [(r["exchange"], r["routing_key"], r["tag"], r["headers"], r["body"]) for r in got] == [
        ("ex", "k", None, [], b"new"), ("ex", 'k"q', "t", [("h", "v")], "café".encode())]


def test_ipc_stream_round_trip_and_empty_page() -> None:
    stored = _stored([{"body": "x" * 100, "routing_key": "k"}] * 2000)
    table = pa.ipc.open_stream(arrow.ipc_stream("q", stored)).read_all()
    assert table.schema == arrow.schema() and table.num_rows == 2000
    assert table.column("body")[1999].as_py() == b"x" * 100 and table.column("routing_key")[0].as_py() == "k"
    empty = pa.ipc.open_stream(arrow.ipc_stream("q", [])).read_all()
    assert empty.num_rows == 0 and empty.schema == arrow.schema()


def test_defaults_make_empty_columns() -> None:
    """The default exchange, no routing keys and no tags: columns of empty strings and of nulls."""
    stored = _stored([{"body": "a"}, {"body_base64": "AAE="}, {"body": "c\\d"}], exchange="")
    got = arrow.record_batch("q", stored, arrow.schema()).to_pylist()
    assert [(r["exchange"], r["routing_key"], r["tag"], r["body"]) for r in got] == [
        ("", "", None, b"a"), ("", "", None, b"\x00\x01"), ("", "", None, b"c\\d")]


@settings(max_examples=30, deadline=None)
@given(st.lists(_message, min_size=2, max_size=20))
def test_records_out_of_buffer_order(messages: list[dict[str, object]]) -> None:
    """Rows whose bytes do not lie in order in the page's buffer (Store.read_columns appends the rows
    of format-1 chunks at its end) are read as well."""
    stored = _stored(messages)
    page = arrow.as_page(stored)
    backwards = ColumnPage(*(column[::-1] for column in (page.offsets, page.positions, page.timestamps, page.flags,
                                                        page.tag_start, page.tag_len, page.data_start, page.data_len)),
                           page.buf, page.next_offset)
    got = arrow.page_batch("q", backwards, arrow.schema()).to_pylist()
    assert got == arrow.record_batch("q", stored[::-1], arrow.schema()).to_pylist()
