"""The recovery point file (app/storage/checkpoint.py): its layout round-trips, any damage makes it
unreadable (never a wrong recovery point), and a write replaces the file whole."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

from chunkmq.storage import checkpoint, files
from chunkmq.storage.checkpoint import Checkpoint


def _sample() -> Checkpoint:
    return Checkpoint(position=123_456_789_012, chunk_records=77, chunk_first_ts=1_700_000_000_000,
                      written_ms=1_700_000_000_500, queues={3: (10, 20, 4096), 1: (0, 5, 100), 2**32 - 1: (1, 1, 0)})


def test_encode_decode_round_trip_and_the_documented_layout() -> None:
    cp = _sample()
    raw = checkpoint.encode(cp)
    assert len(raw) == 48 + 28 * 3 + 4  # the header, 28 bytes a queue, the CRC
    assert raw[:8] == b"CMQCKPT1" and struct.unpack_from("<HHI", raw, 8) == (1, 0, 3)
    assert struct.unpack_from("<Q", raw, 16)[0] == cp.position
    assert struct.unpack_from("<IQQQ", raw, 48) == (1, 0, 5, 100)  # queues sorted by id
    assert struct.unpack_from("<I", raw, len(raw) - 4)[0] == zlib.crc32(raw[:-4])
    assert checkpoint.decode(raw) == cp


def test_an_empty_checkpoint_round_trips() -> None:
    cp = Checkpoint(0, 0, 0, 0)
    assert checkpoint.decode(checkpoint.encode(cp)) == cp


def test_any_flipped_byte_or_truncation_is_refused() -> None:
    raw = checkpoint.encode(_sample())
    rng = random.Random(7)
    for _ in range(200):
        i = rng.randrange(len(raw))
        damaged = bytearray(raw)
        damaged[i] ^= 1 << rng.randrange(8)
        assert checkpoint.decode(bytes(damaged)) is None, i
    for size in range(len(raw)):
        assert checkpoint.decode(raw[:size]) is None, size


def test_a_valid_crc_over_a_wrong_magic_version_or_length_is_refused() -> None:
    raw = checkpoint.encode(_sample())

    def resealed(body: bytes) -> bytes:
        return body + struct.pack("<I", zlib.crc32(body))

    assert checkpoint.decode(resealed(b"CMQCKPT2" + raw[8:-4])) is None
    assert checkpoint.decode(resealed(raw[:8] + struct.pack("<H", 2) + raw[10:-4])) is None
    assert checkpoint.decode(resealed(raw[:-4] + b"\0" * 28)) is None  # one queue more than n_queues


def test_write_then_read_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    assert checkpoint.read(tmp_path) is None  # none yet
    first, second = _sample(), Checkpoint(5, 1, 2, 3, {9: (0, 1, 2)})
    checkpoint.write(tmp_path, first)
    assert checkpoint.read(tmp_path) == first
    checkpoint.write(tmp_path, second)
    assert checkpoint.read(tmp_path) == second
    assert [p.name for p in tmp_path.iterdir()] == [files.checkpoint_path(tmp_path).name]


def test_a_damaged_file_reads_as_none(tmp_path: Path) -> None:
    checkpoint.write(tmp_path, _sample())
    path = files.checkpoint_path(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert checkpoint.read(tmp_path) is None
