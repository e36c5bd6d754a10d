"""The recovery point (app/storage/checkpoint.py): the full file's layout round-trips (version 2, and
version 1 is still read), any damage makes it unreadable (never a wrong recovery point), a write
replaces the file whole, and the journal's records apply in order up to a torn one."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest

from chunkmq.storage import checkpoint, files
from chunkmq.storage.checkpoint import Checkpoint


def _sample() -> Checkpoint:
    return Checkpoint(position=123_456_789_012, chunk_records=77, chunk_first_ts=1_700_000_000_000,
                      written_ms=1_700_000_000_500, queues={3: (10, 20, 4096), 1: (0, 5, 100), 2**32 - 1: (1, 1, 0)},
                      generation=42)


def test_encode_decode_round_trip_and_the_documented_layout() -> None:
    cp = _sample()
    raw = checkpoint.encode(cp)
    assert len(raw) == 56 + 28 * 3 + 4  # the header, 28 bytes a queue, the CRC
    assert raw[:8] == b"CMQCKPT1" and struct.unpack_from("<HHI", raw, 8) == (2, 0, 3)
    assert struct.unpack_from("<Q", raw, 16)[0] == cp.position
    assert struct.unpack_from("<Q", raw, 48)[0] == 42  # the generation
    assert struct.unpack_from("<IQQQ", raw, 56) == (1, 0, 5, 100)  # queues sorted by id
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
    assert checkpoint.decode(resealed(raw[:8] + struct.pack("<H", 3) + raw[10:-4])) is None
    assert checkpoint.decode(resealed(raw[:-4] + b"\0" * 28)) is None  # one queue more than n_queues


def test_a_version_1_file_is_still_read(tmp_path: Path) -> None:
    # what the previous format wrote: the 48-byte header without a generation, and no journal
    cp = _sample()
    body = struct.pack("<8sHHIQQQQ", b"CMQCKPT1", 1, 0, 3, cp.position, cp.chunk_records, cp.chunk_first_ts,
                       cp.written_ms)
    body += b"".join(struct.pack("<IQQQ", q, *v) for q, v in sorted(cp.queues.items()))
    files.checkpoint_path(tmp_path).write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    # a journal beside it (of generation 0) is never applied to a version 1 file
    (tmp_path / checkpoint.JOURNAL).write_bytes(
        checkpoint.journal_header(0) + checkpoint.encode_record(Checkpoint(9, 9, 9, 9, {1: (1, 2, 3)})))
    assert checkpoint.read(tmp_path) == Checkpoint(cp.position, cp.chunk_records, cp.chunk_first_ts,
                                                   cp.written_ms, cp.queues, generation=0)


def test_write_then_read_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    assert checkpoint.read(tmp_path) is None  # none yet
    first, second = _sample(), Checkpoint(5, 1, 2, 3, {9: (0, 1, 2)}, generation=43)
    checkpoint.write(tmp_path, first)
    assert checkpoint.read(tmp_path) == first
    checkpoint.write(tmp_path, second)
    assert checkpoint.read(tmp_path) == second
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([files.checkpoint_path(tmp_path).name,
                                                                 checkpoint.JOURNAL])


def test_journal_records_apply_in_order_up_to_a_torn_one(tmp_path: Path) -> None:
    writer = checkpoint.Writer(tmp_path)
    assert writer.wants_full()
    writer.write_full(Checkpoint(100, 1, 5, 6, {1: (0, 10, 100), 2: (3, 4, 50)}))
    assert not writer.wants_full()
    writer.append(Checkpoint(200, 2, 5, 7, {2: (4, 9, 80), 3: (0, 1, 10)}))  # changed and created
    writer.append(Checkpoint(300, 3, 5, 8, {1: (0, 0, 0)}))  # deleted
    expected = Checkpoint(300, 3, 5, 8, {2: (4, 9, 80), 3: (0, 1, 10)}, writer.generation)
    assert checkpoint.read(tmp_path) == expected
    journal = tmp_path / checkpoint.JOURNAL
    whole = journal.read_bytes()
    writer.append(Checkpoint(400, 4, 5, 9, {2: (9, 9, 0)}))
    last = journal.read_bytes()[len(whole):]
    for cut in range(1, len(last)):  # a torn last record: the ones before it stand
        journal.write_bytes(whole + last[:cut])
        assert checkpoint.read(tmp_path) == expected, cut
    damaged = bytearray(whole + last)
    damaged[len(whole) + 12] ^= 1
    journal.write_bytes(bytes(damaged))
    assert checkpoint.read(tmp_path) == expected
    writer.close()


def test_a_journal_of_another_generation_is_ignored(tmp_path: Path) -> None:
    writer = checkpoint.Writer(tmp_path)
    writer.write_full(Checkpoint(100, 1, 5, 6, {1: (0, 10, 100)}))
    writer.append(Checkpoint(200, 2, 5, 7, {1: (5, 10, 50)}))
    stale = (tmp_path / checkpoint.JOURNAL).read_bytes()
    writer.write_full(Checkpoint(300, 3, 5, 8, {1: (6, 12, 60)}))
    # a crash between the two renames of a full write: the new full file, the old journal
    (tmp_path / checkpoint.JOURNAL).write_bytes(stale)
    assert checkpoint.read(tmp_path) == Checkpoint(300, 3, 5, 8, {1: (6, 12, 60)}, writer.generation)
    writer.close()


def test_the_writer_writes_a_full_file_when_the_journal_outgrows_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "MIN_JOURNAL_BYTES", 1024)
    writer = checkpoint.Writer(tmp_path)
    writer.write_full(Checkpoint(1, 0, 0, 0, {1: (0, 1, 1)}))
    generation = writer.generation
    n = 0
    while not writer.wants_full():
        n += 1
        writer.append(Checkpoint(n, 0, 0, 0, {1: (0, n, n)}))
    assert n == 1024 // 68 + 1 and writer.journal_bytes > 1024  # 68 bytes a record of one queue
    writer.write_full(Checkpoint(n, 0, 0, 0, {1: (0, n, n)}))
    assert writer.generation > generation and not writer.wants_full()
    assert (tmp_path / checkpoint.JOURNAL).stat().st_size == 28  # a new journal: its header alone
    writer.close()


def test_a_damaged_file_reads_as_none(tmp_path: Path) -> None:
    checkpoint.write(tmp_path, _sample())
    path = files.checkpoint_path(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert checkpoint.read(tmp_path) is None
