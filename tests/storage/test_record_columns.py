"""Record columns (app/storage/record_columns.py): many records' fields at once, CRCs checked by
runs, bad rows found."""

from __future__ import annotations

import numpy as np

from chunkmq.storage import NewMessage
from chunkmq.storage.record import CRC_SIZE, FRAME, PAYLOAD, fields_at, record_length
from chunkmq.storage.record_columns import MIN_RUN, _runs_pass, columns
from chunkmq.storage.record_encode import encode_batch


def _page(bodies: list[bytes] | list[NewMessage]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Records of ``bodies`` back to back, with their starts and lengths (as index entries give them)."""
    batch = [body if isinstance(body, NewMessage) else NewMessage(body, [1]) for body in bodies]
    buf, _, _ = encode_batch(batch, 1234, 0, {1: 0, 2: 5}, 1 << 20, {})
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
