"""Record format 1 (app/storage/record_v1.py), read only: records written here by the layout its
docstring gives (an encoder independent of the module) are read back from a real file; a torn or
damaged record ends the valid prefix, never yields garbage."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

from chunkmq.storage import record_v1
from chunkmq.storage.model import Record


def encode(ts: int, flags: int, placements: list[tuple[int, int]], idem: bytes, tag: bytes, data: bytes) -> bytes:
    """One record as the docstring lays it out, all little-endian."""
    payload = struct.pack("<QHHHHI", ts, flags, len(placements), len(idem), len(tag), len(data))
    payload += b"".join(struct.pack("<IQ", q, o) for q, o in placements) + idem + tag + data
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload + struct.pack("<I", len(payload))


RECORDS = [
    (1_700_000_000_000, 0x01 | record_v1.END_OF_BATCH, [(1, 0)], b"", b"", b"hello"),
    (1_700_000_000_001, 0x00, [(1, 1), (7, 42)], b"key-1", b"tag", b"x" * 300),
    (1_700_000_000_002, 0xFF, [], b"", b"t", b""),
]


def _file(tmp_path: Path, records: list[bytes], tail: bytes = b"\0" * 64) -> bytes:
    path = tmp_path / "chunk-v1.data"
    path.write_bytes(b"".join(records) + tail)
    return path.read_bytes()


def test_the_layout_constants_match_the_docstring() -> None:
    assert (record_v1.PAYLOAD_OFFSET, record_v1.PLACEMENTS_OFFSET, record_v1.HEADER_SIZE) == (8, 28, 20)
    assert record_v1.RECORD_OVERHEAD == 32 and record_v1.FRAME == 12
    assert len(encode(0, 0, [(1, 2)], b"ab", b"c", b"defg")) == 32 + 12 + 2 + 1 + 4


def test_records_read_back_from_a_file(tmp_path: Path) -> None:
    raw = [encode(*r) for r in RECORDS]
    buf = _file(tmp_path, raw)
    heads = list(record_v1.iter_records(buf, 0, len(buf)))
    assert [h[1] for h in heads] == [len(r) for r in raw]  # stops at the zero length prefix
    offsets = [h[0] for h in heads]
    for off, (ts, flags, placements, idem, tag, data) in zip(offsets, RECORDS, strict=True):
        assert record_v1.timestamp_at(buf, off) == ts
        assert record_v1.record_length(buf, off, len(buf)) == len(encode(ts, flags, placements, idem, tag, data))
        record = record_v1.decode(buf, off, position=1000 + off)
        assert record == Record(1000 + off, ts, flags & record_v1.CALLER_FLAGS, placements, idem, tag, data)


def test_a_torn_or_damaged_record_ends_the_valid_prefix(tmp_path: Path) -> None:
    raw = [encode(*r) for r in RECORDS]
    whole = b"".join(raw)
    second = len(raw[0])
    rng = random.Random(3)
    for _ in range(100):  # any flipped bit inside the second record: only the first is valid
        damaged = bytearray(whole)
        damaged[second + rng.randrange(len(raw[1]))] ^= 1 << rng.randrange(8)
        assert [h[0] for h in record_v1.iter_records(bytes(damaged), 0, len(damaged))] == [0]
    for cut in range(second, second + len(raw[1])):  # the log ends inside the second record
        assert len(list(record_v1.iter_records(whole, 0, cut))) == 1
    assert record_v1.record_length(whole, second, second + len(raw[1]) - 1) == 0


def test_lengths_that_do_not_add_up_are_refused() -> None:
    good = encode(*RECORDS[1])
    payload = bytearray(good[8:-4])
    struct.pack_into("<H", payload, 12, 3)  # idem_len says 3, the payload holds 5 bytes of key
    resealed = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload + good[-4:]
    assert list(record_v1.iter_records(resealed, 0, len(resealed))) == []
