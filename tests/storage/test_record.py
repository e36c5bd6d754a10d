from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkmq.storage import MessageColumns, MessageTooLarge, NewMessage, tag_hash
from chunkmq.storage.queue_index import unpack_entries
from chunkmq.storage.record import (
    COLUMNS_MIN,
    CRC_SIZE,
    FIELDS_AT,
    FRAME,
    HEAD,
    HEADER_SIZE,
    L_END,
    LONG_FRAME,
    MIN_RUN,
    PAYLOAD,
    _runs_pass,
    columns,
    declared_length,
    decode,
    encode_batch,
    encode_columns,
    encode_one,
    encode_records,
    fields_at,
    iter_records,
    length_before,
    placements_at,
    record_length,
    record_size,
    timestamp_at,
)

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


def test_limits(codec: str) -> None:
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
def test_record_size_is_the_encoded_size(codec: str, data: bytes, tag: bytes, key: bytes, queues: list[int]) -> None:
    """record_size, which publish limits are checked with, bounds what the encoder writes; the index
    entry (and so the queue's byte count) records the exact size."""
    buf, _, entries = encode_batch([NewMessage(data, queues, tag, key)], 0, 0, {1: 0, 2: 70000}, 1 << 20, {})
    size = len(buf)
    assert size == record_length(buf, 0, len(buf)) <= record_size(len(data), len(queues), len(key), len(tag))
    for packed, added in entries.values():
        lengths = unpack_entries(packed)[1::2]
        assert all(length & 0xFFFFFFFF == size for length in lengths) and added == size * len(lengths)


_record = st.tuples(
    st.one_of(st.binary(max_size=120), st.binary(min_size=240, max_size=300)),
    st.lists(st.sampled_from([1, 300, 70_000, 5]), max_size=3).map(tuple) | st.sampled_from([(1,), (300,)]),
    st.sampled_from([b"", b"", b"t", b"tag"]),
    st.sampled_from([b"", b"", b"k", b"k" * 40]),
    st.sampled_from([0, 0, 1, 255]),
)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=80), optional=st.booleans(),
       limit=st.sampled_from([1 << 20, 200]), bad_flags=st.integers(min_value=-1, max_value=90))
def test_encode_columns_writes_what_encode_records_writes(records: list[tuple], optional: bool, limit: int,
                                                          bad_flags: int) -> None:
    """The batch encoder against the per-record one: the same bytes, placements, index entries and
    next offsets, or the same error; across offset widths (65536, 2**24, 2**32), tags, keys, several
    or no placements, long frames and flags."""
    data, queues, tags, keys, flags = (list(column) for column in zip(*records, strict=True))
    if bad_flags < len(flags):
        flags[bad_flags] = 256 if bad_flags >= 0 else -1  # one record with invalid flags, now and then
    if optional:  # columns nobody uses are None
        tags, keys, flags = (c if any(c) else None for c in (tags, keys, flags))
    batch = MessageColumns(data, queues, tags, keys, flags)  # type: ignore[arg-type]
    start = {1: 65_530, 300: 0, 70_000: (1 << 24) - 3, 5: (1 << 32) - 2}
    outcomes = []
    for encode in (encode_records, encode_columns):
        offsets = dict(start)
        try:
            outcomes.append((encode(batch, 1_700_000_000_123, 4096, offsets, limit, {}), offsets))
        except (MessageTooLarge, ValueError) as exc:
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]
    if isinstance(outcomes[0][0], tuple):  # encoded: and readable as the records it was given
        buf = outcomes[0][0][0]
        assert [r[7] for r in iter_records(buf, 0, len(buf))] == [len(d) for d in data]


@pytest.mark.parametrize("queue", [1, 300, 70_000])
@pytest.mark.parametrize("offset", [0, 65_530, (1 << 24) - 3, (1 << 32) - 2])
@pytest.mark.parametrize("flags", [None, [0, 7, 255, 1] * 5])
def test_encode_columns_of_one_queue_writes_what_encode_records_writes(queue: int, offset: int,
                                                                       flags: list[int] | None) -> None:
    """The common batch (one queue, no tags or keys), whose offsets cross a width boundary."""
    data = [b"x" * n for n in (0, 100, 240, 300, 5) * 4]
    batch = MessageColumns(data, [(queue,)] * len(data), None, None, flags)
    encoded = [encode(batch, 77, 10, {queue: offset}, 1 << 20, {}) for encode in (encode_records, encode_columns)]
    assert encoded[0] == encoded[1]


def test_encode_columns_raises_for_an_unknown_queue_as_encode_records_does() -> None:
    batch = MessageColumns([b"a"] * 3, [(1,), (2,), (3,)])
    for encode in (encode_records, encode_columns):
        with pytest.raises(KeyError, match="3"):
            encode(batch, 0, 0, {1: 0, 2: 0}, 1 << 20, {})


def test_encode_batch_of_a_large_batch_writes_what_encode_records_writes(codec: str) -> None:
    big = [NewMessage(b"x" * 100, [1])] * COLUMNS_MIN
    assert (encode_batch(big, 5, 0, {1: 0}, 1 << 20, {})
            == encode_records(MessageColumns.of(big), 5, 0, {1: 0}, 1 << 20, {}))


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


def _page(bodies: list[bytes] | list[NewMessage]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Records of ``bodies`` back to back, with their starts and lengths (as index entries give them)."""
    buf, _ = _encode([body if isinstance(body, NewMessage) else NewMessage(body, [1]) for body in bodies])
    starts, off = [], 0
    while off < len(buf):
        starts.append(off)
        off += record_length(buf, off, len(buf))
    starts_a = np.array(starts, np.int64)
    return buf, starts_a, np.diff([*starts, len(buf)])


def _valid(buf: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[int]:
    ok = columns(buf, starts, lengths, np.ones(len(starts), bool))[-1]
    return np.flatnonzero(~ok).tolist()


def test_columns_check_runs_of_records_with_one_crc_and_find_the_bad_ones(codec: str) -> None:
    buf, starts, lengths = _page([b"%099d" % i for i in range(200)])
    assert len(set(lengths.tolist())) == 1  # one run of same-sized records
    b = np.frombuffer(buf, np.uint8)
    plen = lengths - FRAME
    assert _runs_pass(b, starts, lengths, plen, np.zeros(200, bool), np.arange(200)).all()
    assert _valid(buf, starts, lengths) == []
    for where in (PAYLOAD + 3, PAYLOAD + 60, 1):  # in the payload, in the stored CRC
        bad = bytearray(buf)
        bad[int(starts[57]) + where] ^= 0x10
        assert not _runs_pass(np.frombuffer(bytes(bad), np.uint8), starts, lengths, plen,
                              np.zeros(200, bool), np.arange(200)).any()
        assert _valid(bytes(bad), starts, lengths) == [57]
    # the same flip in two records, and in every record: still each one found
    bad = bytearray(buf)
    for i in (10, 11):
        bad[int(starts[i]) + PAYLOAD + 20] ^= 1
    assert _valid(bytes(bad), starts, lengths) == [10, 11]
    bad = bytearray(buf)
    for i in range(200):
        bad[int(starts[i]) + PAYLOAD + CRC_SIZE] ^= 4
    assert _valid(bytes(bad), starts, lengths) == list(range(200))


def test_columns_check_mixed_lengths_gaps_and_short_runs(codec: str) -> None:
    bodies = [b"a" * 100] * (MIN_RUN + 5) + [b"bb"] * 3 + [b"c" * 300] * 2 + [b"d" * 50] * (MIN_RUN + 1)
    buf, starts, lengths = _page(bodies)
    assert _valid(buf, starts, lengths) == []
    every_other = np.arange(0, len(starts), 2)  # records with others between them: no run
    assert columns(buf, starts[every_other], lengths[every_other], np.ones(len(every_other), bool))[-1].all()
    bad = bytearray(buf)
    for i in (3, MIN_RUN + 6, MIN_RUN + 8, len(bodies) - 1):
        suffix = 5 if lengths[i] > 255 else 1  # a long record ends in its length (u32), then 0xFF
        bad[int(starts[i]) + int(lengths[i]) - suffix - 1] ^= 0x80  # the payload's last byte
    assert _valid(bytes(bad), starts, lengths) == [3, MIN_RUN + 6, MIN_RUN + 8, len(bodies) - 1]


def test_columns_read_tags_keys_placements_and_long_records_as_fields_at_does(codec: str) -> None:
    """The fields that a page of plain small records lacks (each skipped when no row has it)."""
    messages = [NewMessage(b"x" * 10, [1]), NewMessage(b"y" * 300, [1, 2], tag=b"t1"),
                NewMessage(b"z", [1], idempotency_key=b"k"), NewMessage(b"w" * 20, [2, 1], b"tag", b"key", 3)]
    for batch in (messages, messages[:1] * 3, messages[1:2] * 2, messages[2:] * 2):
        buf, starts, lengths = _page(batch)
        valid = np.ones(len(starts), bool)
        ts, flags, tag_start, tag_len, data_start, data_len, ok = columns(buf, starts, lengths, valid)
        assert ok.all()
        for i, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
            fields = (int(ts[i]), int(flags[i]), buf[tag_start[i] : tag_start[i] + tag_len[i]],
                      buf[data_start[i] : data_start[i] + data_len[i]])
            assert fields == fields_at(buf, start, length, True)


def test_encode_one_is_encode_batch_of_one_record(codec: str) -> None:
    for data, flags in itertools.product((b"", b"short", b"x" * 300, b"y" * 70_000), (0, 1, 255)):
        buf, packed, added = encode_one(data, 5, 1_700_000_000_000, 4096, 17, 1 << 20, {}, flags)
        expected, _, entries = encode_batch(MessageColumns([data], [(5,)], flags=[flags]), 1_700_000_000_000, 4096,
                                            {5: 17}, 1 << 20, {})
        assert (buf, packed, added) == (expected, *entries[5])
    with pytest.raises(MessageTooLarge):
        encode_one(b"z" * 101, 5, 0, 0, 0, 100, {})
    with pytest.raises(ValueError, match=r"flags must be within 0\.\.255"):
        encode_one(b"z", 5, 0, 0, 0, 100, {}, 256)
