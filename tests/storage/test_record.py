from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkmq.storage import NewMessage, tag_hash
from chunkmq.storage.queue_index import unpack_entries
from chunkmq.storage.record import (
    FIELDS_AT,
    FRAME,
    HEAD,
    HEADER_SIZE,
    L_END,
    LONG_FRAME,
    PAYLOAD,
    declared_length,
    decode,
    iter_records,
    length_before,
    placements_at,
    record_length,
    record_size,
    timestamp_at,
)
from chunkmq.storage.record_encode import encode_batch

LAYOUT_AT = PAYLOAD + 7  # a short record's layout byte


def _encode(batch: list[NewMessage], position: int = 0) -> tuple[bytes, list]:
    buf, appended, _ = encode_batch(batch, 1234, position, {1: 0, 2: 5}, 1 << 20, {})
    return buf, appended


def test_round_trip_all_fields(codec: str) -> None:
    batch = [
        NewMessage(b"one", [1], tag=b"t", idempotency_key=b"k1", flags=3),
        NewMessage(b"", [1, 2]),
        NewMessage(b"x" * 1000, []),
    ]
    buf, appended = _encode(batch, position=100)
    assert [a.offsets for a in appended] == [[(1, 0)], [(1, 1), (2, 5)], []]
    off = 0
    records = []
    for a in appended:
        n = record_length(buf, off, len(buf))
        assert n > FRAME
        records.append(decode(buf, off, a.position))
        assert a.position == 100 + off
        off += n
    assert off == len(buf)
    assert records[0].data == b"one" and records[0].tag == b"t" and records[0].idempotency_key == b"k1"
    assert records[0].flags == 3 and records[0].timestamp == 1234
    assert records[1].placements == [(1, 1), (2, 5)] and records[1].data == b""
    assert records[2].placements == [] and records[2].data == b"x" * 1000


def test_end_of_batch_only_on_last_record(codec: str) -> None:
    buf, _ = _encode([NewMessage(b"a", [1]), NewMessage(b"b", [1])])
    assert not buf[LAYOUT_AT] & L_END
    second = record_length(buf, 0, len(buf))
    assert buf[second + LAYOUT_AT] & L_END


def test_every_single_bit_flip_is_detected(codec: str) -> None:
    buf, _ = _encode([NewMessage(b"payload", [1], tag=b"tag")])
    for bit in range(len(buf) * 8):
        bad = bytearray(buf)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert record_length(bytes(bad), 0, len(bad)) == 0, bit


def test_truncated_and_zero_records_are_invalid(codec: str) -> None:
    buf, _ = _encode([NewMessage(b"payload", [1])])
    for cut in range(len(buf)):
        assert record_length(buf[:cut], 0, cut) == 0
    assert record_length(bytes(64), 0, 64) == 0


def test_tag_hash() -> None:
    assert tag_hash(b"") == 0
    assert tag_hash(b"a") == tag_hash(b"a") != 0
    assert tag_hash(b"a") != tag_hash(b"b")


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), tag=st.binary(max_size=40), key=st.binary(max_size=40),
       queues=st.lists(st.integers(1, 2), max_size=4))
def test_record_size_is_the_encoded_size(codec: str, data: bytes, tag: bytes, key: bytes, queues: list[int]) -> None:
    """record_size, which publish limits are checked with, bounds what the encoder writes; the index
    entry (and so the queue's byte count) records the exact size."""
    buf, _, entries = encode_batch([NewMessage(data, queues, tag, key)], 0, 0, {1: 0, 2: 70000}, 1 << 20, {})
    size = len(buf)
    assert size == record_length(buf, 0, len(buf)) <= record_size(len(data), len(queues), len(key), len(tag))
    for packed, added in entries.values():
        lengths = unpack_entries(packed)[1::2]
        assert all(length & 0xFFFFFFFF == size for length in lengths) and added == size * len(lengths)


def test_layout_constants_follow_each_other() -> None:
    assert (PAYLOAD, HEADER_SIZE, FIELDS_AT, FRAME, LONG_FRAME) == (5, 8, 13, 6, 14)
    assert HEAD.size == PAYLOAD + HEADER_SIZE == FIELDS_AT


@pytest.mark.parametrize(("queue", "offset", "size"), [(1, 0, 117), (1, 65535, 117), (300, 65536, 119),
                                                       (70000, 1 << 24, 122), (1, 1 << 32, 123)])
def test_a_100_byte_record_takes_its_data_plus_17_to_23_bytes(codec: str, queue: int, offset: int, size: int) -> None:
    """Format 2 writes the placement in the fewest bytes that hold it (format 1: 144 bytes for all)."""
    buf, _, _ = encode_batch([NewMessage(b"x" * 100, [queue])], 1, 0, {queue: offset}, 1 << 20, {})
    assert len(buf) == size
    assert placements_at(buf, 0) == [(queue, offset)]


def test_long_records_and_reading_backwards(codec: str) -> None:
    """Payloads of 255 bytes and more take the 5-byte prefix and suffix; the suffix reads backwards."""
    batch = [NewMessage(b"a" * 200, [1]), NewMessage(b"b" * 247, [1]), NewMessage(b"c" * 5000, [2], tag=b"t"),
             NewMessage(b"d", [1])]
    buf, _ = _encode(batch)
    heads = list(iter_records(buf, 0, len(buf)))
    assert [h[1] for h in heads] == [6 + 8 + 3 + 200, 14 + 8 + 3 + 247, 14 + 8 + 2 + 3 + 1 + 5000, 6 + 8 + 3 + 1]
    assert [decode(buf, h[0], 0).data for h in heads] == [m.data for m in batch]
    assert all(timestamp_at(buf, h[0]) == 1234 for h in heads)
    for h in heads:
        assert declared_length(buf, h[0], len(buf)) == h[1]
        assert length_before(buf, 0, h[0] + h[1]) == h[1]
        assert length_before(buf, 0, h[0] + h[1] - 1) == 0  # not a record boundary
    assert declared_length(bytes(16), 0, 16) == 0


def test_iter_records_stops_at_the_first_invalid_record(codec: str) -> None:
    buf, appended = _encode([NewMessage(b"a", [1]), NewMessage(b"bb", [1]), NewMessage(b"ccc", [2])])
    heads = list(iter_records(buf, 0, len(buf)))
    assert [h[0] for h in heads] == [a.position for a in appended]
    assert sum(h[1] for h in heads) == len(buf)
    assert [h[7] for h in heads] == [1, 2, 3]  # data_len
    bad = bytearray(buf)
    bad[heads[1][0] + FIELDS_AT] ^= 1  # a placement byte of the second record: CRC mismatch
    assert [h[0] for h in iter_records(bytes(bad), 0, len(bad))] == [0]
    assert list(iter_records(buf, 0, heads[2][0] + 3)) == heads[:2]  # the third is cut by the limit


