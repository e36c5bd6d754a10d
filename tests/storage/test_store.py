from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import chunkmq.storage as storage
from chunkmq.storage import (
    NewMessage,
    StorageError,
    Store,
    UnknownQueue,
    tag_hash,
)
from chunkmq.storage.chunk import HEADER_SIZE
from chunkmq.storage.record import FIELDS_AT
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_public_api_is_exported() -> None:
    for name in storage.__all__:
        assert hasattr(storage, name), name
    errors = [getattr(storage, n) for n in storage.__all__ if isinstance(getattr(storage, n), type)
              and issubclass(getattr(storage, n), StorageError) and getattr(storage, n) is not StorageError]
    assert len(errors) == 8  # their API codes are in app/api/errors.py's map (tests/api/test_errors.py)
    assert issubclass(UnknownQueue, KeyError)


def test_round_trip(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(7)
    s.create_queue(7)  # idempotent
    appended = s.append([NewMessage(b"a", [7], tag=b"red", flags=1), NewMessage(b"b", [7], idempotency_key=b"k")])
    assert [a.offsets for a in appended] == [[(7, 0)], [(7, 1)]]
    assert appended[0].timestamp <= appended[1].timestamp
    got = s.read(7, 0, 10)
    fields = [(offset, data, tag, flags) for offset, _, _, flags, tag, data in got]
    assert fields == [(0, b"a", b"red", 1), (1, b"b", b"", 0)]
    assert [position for _, position, *_ in got] == [a.position for a in appended]
    rec = s.read_at(appended[1].position)
    assert rec.idempotency_key == b"k" and rec.placements == [(7, 1)]
    assert s.next_offset(7) == 2 and s.first_offset(7) == 0
    assert s.queue_bytes(7) == sum(e.length for e in s.index_entries(7, 0, 10))
    assert s.end_position == appended[1].position + s.index_entries(7, 1, 1)[0].length
    assert s.index_entries(7, 0, 10)[0].tag_hash == tag_hash(b"red")
    assert s.read(7, 2, 10) == [] and s.read(7, 0, 0) == []
    with pytest.raises(KeyError):
        s.read_at(appended[1].position + 1)
    with pytest.raises(KeyError):
        s.read_at(10**12)


def test_reopen_gives_same_answers(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    for q in (1, 2, 3):
        s.create_queue(q)
    for i in range(60):
        s.append(msgs(1 + i % 3, 1 + i % 5, prefix=str(i)))
    before = {q: s.read(q, 0, 10_000) for q in (1, 2, 3)}
    chunks_before = [(c.number, c.data_bytes, c.records) for c in s.chunks()]
    s.close()
    s2 = open_store()
    assert s2.recovery.records_replayed == 0 and s2.recovery.bytes_truncated == 0
    assert {q: s2.read(q, 0, 10_000) for q in (1, 2, 3)} == before
    assert [(c.number, c.data_bytes, c.records) for c in s2.chunks()] == chunks_before


def test_corrupt_record_is_reported_on_read(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    s.create_queue(1)
    s.append(msgs(1, 5, prefix="payload"))
    s.close()
    path = tmp_path / "store" / "log" / f"{0:020d}.chunk"
    raw = bytearray(path.read_bytes())
    raw[HEADER_SIZE + FIELDS_AT + 3] ^= 0x01  # inside the first record's data
    path.write_bytes(bytes(raw))
    (tmp_path / "store" / "checkpoint").unlink()
    s2 = open_store()
    # the flipped record is in the tail (no checkpoint): recovery cut from there and kept a copy
    assert s2.recovery.bytes_truncated > 0
    assert list((tmp_path / "store" / "log").glob("*.tail.bad"))
    assert s2.next_offset(1) == 0
