"""The binary batch body (app/wire/batch.py): each layout written and read back, and docs/api.md's
example byte for byte."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from chunkmq.wire import batch as wire


def test_a_column_is_its_values_little_endian_back_to_back() -> None:
    assert wire.column_bytes("H", [1, 0x0203]) == b"\x01\x00\x03\x02"
    values = [0, 1, 2**32, 2**64 - 1]
    assert wire.column_bytes("Q", values) == struct.pack("<4Q", *values)
    assert wire.column_bytes("Q", np.array(values, np.uint64)) == struct.pack("<4Q", *values)
    assert wire.column_bytes("I", []) == b""
    assert wire.read_column("Q", struct.pack("<4Q", *values)) == values


def test_the_publish_example_of_docs_api_md() -> None:
    example = bytes.fromhex("01000000 02000000 0100 00 6b 6869")
    assert wire.encode_publish([b"hi"], [b"k"], [0]) == example
    assert wire.encode_publish_text([2], b"k", b"hi") == example
    assert wire.decode_publish(example, 10) == wire.PublishColumns([2], [1], [0], 11, 12)


def test_a_publish_batch_reads_back() -> None:
    bodies, keys, flags = [b"one", b"\x00\x01", b""], [b"a", b"", b"key"], [0, wire.BINARY, 0]
    body = wire.encode_publish(bodies, keys, flags)
    columns = wire.decode_publish(body, 3)
    assert (columns.body_lengths, columns.key_lengths, columns.flags) == ([3, 2, 0], [1, 0, 3], flags)
    assert list(wire.slices(body, columns.keys_start, columns.key_lengths)) == keys
    assert list(wire.slices(body, columns.bodies_start, columns.body_lengths)) == bodies
    with pytest.raises(ValueError, match="at least one"):
        wire.encode_publish([], [], [])


@pytest.mark.parametrize(("body", "error", "message"), [
    (b"\x01\x00", wire.MalformedBatch, "starts with its record count"),
    (struct.pack("<I", 0), wire.MalformedBatch, "at least one record"),
    (struct.pack("<I", 4), wire.TooManyRecords, "at most 3 messages"),
    (struct.pack("<I", 1) + b"\x01", wire.MalformedBatch, "columns are truncated"),
    (wire.encode_publish([b"hi"], [b"k"], [0]) + b"x", wire.MalformedBatch, "add up to 3 bytes, but 4 follow"),
    (wire.encode_publish([b"hi"], [b"k"], [2]), wire.MalformedBatch, "record 0 has unknown flags"),
])
def test_a_malformed_publish_batch_says_what_is_wrong(body: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        wire.decode_publish(body, 3)


def test_results_read_back() -> None:
    out = wire.encode_results([0x10, 0x20], [1, 2], [5, 6, 0], bytes([2, 2, 6]), b"q1q1queue2")
    assert out[:4] == struct.pack("<I", 2)
    assert wire.decode_results(out) == wire.Results([0x10, 0x20], [1, 2], [5, 6, 0], [b"q1", b"q1", b"queue2"])
    one = wire.encode_results([7], None, [3], b"\x01", b"q")
    assert wire.decode_results(one) == wire.Results([7], [1], [3], [b"q"])


def test_delivered_messages_read_back() -> None:
    columns = ([7, 8], [0x2A, 0x50], [1000, 1001], [1, 3], [0, wire.BINARY], [0, 2], [1, 0], [1, 0], [0, 9], [4, 2])
    regions = (b"ex", b"k", b"t", b'{"a":"b"}', b"text\x00\x01")
    d = wire.decode_delivered(wire.encode_delivered(2, columns, regions))
    assert (d.offsets, wire.read_column("Q", d.ids), d.timestamps, d.delivery_counts) == (
        [7, 8], [0x2A, 0x50], [1000, 1001], [1, 3])
    assert (list(d.flags), d.exchanges, d.routing_keys, d.tags) == ([0, 1], [b"", b"ex"], [b"k", b""], [b"t", b""])
    assert (d.headers, d.body_lengths, d.bodies) == ([b"", b'{"a":"b"}'], [4, 2], b"text\x00\x01")
    empty = wire.decode_delivered(wire.encode_delivered(0, [b""] * 10, [b""] * 5))
    assert empty.offsets == [] and empty.exchanges is None and empty.bodies == b""
    assert wire.encode_delivered(0, [b""] * 10, [b""] * 5) == struct.pack("<I", 0)
