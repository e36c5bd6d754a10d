from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.storage import MessageTooLarge, NewMessage, tag_hash
from app.storage.record import (
    DATA_LEN_OFFSET,
    END_OF_BATCH,
    FLAGS_OFFSET,
    FLAGS_SIZE,
    FRAME,
    HEAD,
    HEADER,
    HEADER_SIZE,
    PAYLOAD_OFFSET,
    PLACEMENT,
    PLACEMENT_SIZE,
    PLACEMENTS_OFFSET,
    RECORD_OVERHEAD,
    decode,
    encode_batch,
    iter_records,
    record_length,
    record_size,
)


def _encode(batch: list[NewMessage], position: int = 0) -> tuple[bytes, list]:
    buf, appended, _ = encode_batch(batch, 1234, position, {1: 0, 2: 5}, 1 << 20, {})
    return buf, appended


def test_round_trip_all_fields() -> None:
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


def test_end_of_batch_only_on_last_record() -> None:
    buf, _ = _encode([NewMessage(b"a", [1]), NewMessage(b"b", [1])])
    first_flags = int.from_bytes(buf[FLAGS_OFFSET : FLAGS_OFFSET + FLAGS_SIZE], "little")
    assert not first_flags & END_OF_BATCH
    second = record_length(buf, 0, len(buf))
    assert int.from_bytes(buf[second + FLAGS_OFFSET : second + FLAGS_OFFSET + FLAGS_SIZE], "little") & END_OF_BATCH


def test_every_single_bit_flip_is_detected() -> None:
    buf, _ = _encode([NewMessage(b"payload", [1], tag=b"tag")])
    for bit in range(len(buf) * 8):
        bad = bytearray(buf)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert record_length(bytes(bad), 0, len(bad)) == 0, bit


def test_truncated_and_zero_records_are_invalid() -> None:
    buf, _ = _encode([NewMessage(b"payload", [1])])
    for cut in range(len(buf)):
        assert record_length(buf[:cut], 0, cut) == 0
    assert record_length(bytes(64), 0, 64) == 0


def test_limits() -> None:
    with pytest.raises(MessageTooLarge):
        encode_batch([NewMessage(b"x" * 11, [1])], 0, 0, {1: 0}, 10, {})
    with pytest.raises(MessageTooLarge):
        encode_batch([NewMessage(b"x", [1], tag=b"t" * 70000)], 0, 0, {1: 0}, 10, {})
    with pytest.raises(ValueError):
        encode_batch([NewMessage(b"x", [1], flags=256)], 0, 0, {1: 0}, 10, {})


def test_tag_hash() -> None:
    assert tag_hash(b"") == 0
    assert tag_hash(b"a") == tag_hash(b"a") != 0
    assert tag_hash(b"a") != tag_hash(b"b")


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), tag=st.binary(max_size=40), key=st.binary(max_size=40),
       queues=st.lists(st.integers(1, 2), max_size=4))
def test_record_size_is_the_encoded_size(data: bytes, tag: bytes, key: bytes, queues: list[int]) -> None:
    """record_size, which publish limits are checked with, is exactly what the encoder writes and
    what the index entry (and so the queue's byte count) records."""
    buf, _, entries = encode_batch([NewMessage(data, queues, tag, key)], 0, 0, {1: 0, 2: 0}, 1 << 20, {})
    size = record_size(len(data), len(queues), len(key), len(tag))
    assert len(buf) == size == record_length(buf, 0, len(buf))
    for flat in entries.values():
        assert all(length & 0xFFFFFFFF == size for length in flat[1::2])


def test_layout_constants_follow_each_other() -> None:
    assert (PAYLOAD_OFFSET, FLAGS_OFFSET, DATA_LEN_OFFSET, PLACEMENTS_OFFSET) == (8, 16, 24, 28)
    assert (HEADER_SIZE, FRAME, RECORD_OVERHEAD) == (20, 12, 32)
    assert HEAD.size == PLACEMENTS_OFFSET and HEADER.size == HEADER_SIZE and PLACEMENT.size == PLACEMENT_SIZE


def test_iter_records_stops_at_the_first_invalid_record() -> None:
    buf, appended = _encode([NewMessage(b"a", [1]), NewMessage(b"bb", [1]), NewMessage(b"ccc", [2])])
    heads = list(iter_records(buf, 0, len(buf)))
    assert [h[0] for h in heads] == [a.position for a in appended]
    assert sum(h[1] for h in heads) == len(buf)
    assert [h[7] for h in heads] == [1, 2, 3]  # data_len
    bad = bytearray(buf)
    bad[heads[1][0] + PLACEMENTS_OFFSET] ^= 1  # a placement byte of the second record: CRC mismatch
    assert [h[0] for h in iter_records(bytes(bad), 0, len(bad))] == [0]
    assert list(iter_records(buf, 0, heads[2][0] + 3)) == heads[:2]  # the third is cut by the limit
