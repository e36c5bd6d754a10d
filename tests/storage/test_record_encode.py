"""Record encoding (app/storage/record_encode.py): the record-by-record, column-by-column and
compiled encoders write the same bytes and refuse the same records."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkmq.storage import MessageColumns, MessageTooLarge, NewMessage
from chunkmq.storage.record import iter_records
from chunkmq.storage.record_encode import COLUMNS_MIN, encode_batch, encode_columns, encode_one, encode_records


def test_limits(codec: str) -> None:
    with pytest.raises(MessageTooLarge):
        encode_batch([NewMessage(b"x" * 11, [1])], 0, 0, {1: 0}, 10, {})
    with pytest.raises(MessageTooLarge):
        encode_batch([NewMessage(b"x", [1], tag=b"t" * 70000)], 0, 0, {1: 0}, 10, {})
    with pytest.raises(ValueError):
        encode_batch([NewMessage(b"x", [1], flags=256)], 0, 0, {1: 0}, 10, {})


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
