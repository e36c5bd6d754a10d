from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from chunkmq.storage import CorruptChunk, NewMessage, Store, StoredMessage, tag_hash
from chunkmq.storage.chunk import HEADER_SIZE
from chunkmq.storage.record import FIELDS_AT
from tests.storage.conftest import SMALL, crash_image, msgs

Opener = Callable[..., Store]

DATA_AT = FIELDS_AT + 3  # a record's data, with one placement (queue id < 256, offset < 65536), no tag, no key


def chunk_file(root: Path, number: int) -> Path:
    return root / "log" / f"{number:020d}.chunk"


def contents(s: Store) -> dict[int, list[tuple[int, bytes]]]:
    return {q: [(offset, data) for offset, *_, data in s.read(q, 0, 100_000)] for q in s.queue_ids()}


def fill(s: Store, batches: int, queues: tuple[int, ...] = (1, 2)) -> list[list[int]]:
    """Append `batches` batches round-robin; returns the positions of each batch."""
    for q in queues:
        s.create_queue(q)
    out = []
    for i in range(batches):
        out.append([a.position for a in s.append(msgs(queues[i % len(queues)], 3, prefix=f"b{i}"))])
    return out


def test_torn_tail_after_the_recovery_point(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 6)
    s.flush()
    fill(s, 3)
    want = contents(s)
    end = s.end_position
    img = crash_image(tmp_path / "store", tmp_path / "img")
    number, local = divmod(end, SMALL.chunk_size)
    with open(chunk_file(img, number), "r+b") as f:  # half a record that never completed
        f.seek(HEADER_SIZE + local)
        f.write(b"\x50\x00\x00\x00\xde\xad\xbe\xef" + os.urandom(30))
    r = open_store(img)
    assert r.recovery.checkpoint_found and r.recovery.bytes_truncated == 38
    assert r.recovery.records_replayed == 9
    assert contents(r) == want and r.end_position == end
    r.append(msgs(1, 2, prefix="after"))
    assert r.read(1, r.next_offset(1) - 2, 5)[0][-1] == b"after-0"


def test_incomplete_trailing_batch_is_dropped(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 4)
    want = contents(s)
    last = s.append(msgs(1, 3, prefix="partial"))  # its end-of-batch record will be lost
    img = crash_image(tmp_path / "store", tmp_path / "img")
    number, local = divmod(last[2].position, SMALL.chunk_size)
    with open(chunk_file(img, number), "r+b") as f:
        f.seek(HEADER_SIZE + local)
        f.write(bytes(64))
    r = open_store(img)
    assert r.recovery.batches_dropped == 1 and r.recovery.index_entries_zeroed == 3
    assert contents(r) == want
    assert r.end_position == last[0].position
    assert r.append(msgs(1, 1))[0].position == last[0].position  # appends continue where it was cut


def test_truncated_active_chunk(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    batches = fill(s, 4)
    s.flush()
    img = crash_image(tmp_path / "store", tmp_path / "img")
    number, local = divmod(batches[-1][1], SMALL.chunk_size)
    os.truncate(chunk_file(img, number), HEADER_SIZE + local + 5)  # mid-record of the last batch
    r = open_store(img)
    # the log is now shorter than the recovery point: the queues follow the log
    assert r.end_position == batches[-1][0]
    assert r.next_offset(2) == 3  # batch 3 (queue 2) is gone, batch 1 stays
    assert [data for *_, data in r.read(2, 0, 10)] == [b"b1-0", b"b1-1", b"b1-2"]
    assert r.read(1, 0, 10)[-1][-1] == b"b2-2"
    r.append(msgs(2, 1, prefix="new"))
    assert r.read(2, 3, 1)[0][-1] == b"new-0"


def test_no_checkpoint_full_scan_gives_same_answers(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 40, queues=(1, 2, 3))
    s.set_first_offset(3, 4)
    want = contents(s)
    img = crash_image(tmp_path / "store", tmp_path / "img")
    (img / "checkpoint").unlink()
    r = open_store(img)
    assert not r.recovery.checkpoint_found and r.recovery.records_replayed == 120
    got = contents(r)
    assert got[1] == want[1] and got[2] == want[2]
    assert got[3][-len(want[3]):] == want[3]  # a floor set after the last checkpoint may come back


def test_index_rebuild_after_deleting_or_truncating_index_files(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 30)
    want = contents(s)
    entries = {q: s.index_entries(q, 0, 1000) for q in (1, 2)}
    s.close()
    qdir = tmp_path / "store" / "queues"
    files1 = sorted((qdir / f"{1:010d}").iterdir())
    files2 = sorted((qdir / f"{2:010d}").iterdir())
    files1[1].unlink()
    os.truncate(files2[-1], 100)
    r = open_store()
    assert r.recovery.queues_rebuilt == [1, 2]
    assert contents(r) == want
    assert {q: r.index_entries(q, 0, 1000) for q in (1, 2)} == entries
    assert r.queue_bytes(1) == sum(e.length for e in entries[1])


def test_bad_header_quarantines_that_chunk_only(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 300)
    assert len(s.chunks()) >= 3
    s.close()
    with open(chunk_file(tmp_path / "store", 1), "r+b") as f:
        f.write(b"garbage!")
    r = open_store()
    assert r.recovery.quarantined == [1]
    assert (tmp_path / "store" / "log" / f"{1:020d}.chunk.bad").exists()
    got = r.read(1, 0, 10_000)
    assert got and all(position // SMALL.chunk_size != 1 for _, position, *_ in got)
    assert got[-1][-1] == b"b298-2"  # everything after the bad chunk is still readable
    r.append(msgs(1, 1))


def test_flipped_bit_in_a_sealed_chunk(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    batches = fill(s, 200)
    s.close()
    pos = batches[2][0]  # queue 1, chunk 0
    with open(chunk_file(tmp_path / "store", 0), "r+b") as f:
        f.seek(HEADER_SIZE + pos + DATA_AT)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    r = open_store()
    assert r.recovery.quarantined == []  # sealed chunks are trusted at open (restart ~ tail only)
    with pytest.raises(CorruptChunk):
        r.read(1, 0, 100)
    assert len(r.read(2, 0, 100)) > 0  # queue 2 does not touch the bad record
    assert r.verify() == [0]
    assert r.read(1, 0, 1)[0][1] >= SMALL.chunk_size  # quarantined chunk reads as gone
    assert r.read(1, 0, 10_000)[-1][-1] == b"b198-2"


def test_stale_index_entries_beyond_the_log_are_zeroed(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 4)
    s.flush()
    end = s.end_position
    s.append(msgs(1, 5, prefix="lost"))
    img = crash_image(tmp_path / "store", tmp_path / "img")
    number, local = divmod(end, SMALL.chunk_size)
    fd = os.open(chunk_file(img, number), os.O_RDWR)  # as if the log pages never reached the disk
    os.pwrite(fd, bytes(SMALL.chunk_size - local), HEADER_SIZE + local)
    os.close(fd)
    r = open_store(img)
    assert r.recovery.index_entries_zeroed == 5
    assert r.next_offset(1) == 6
    assert r.index_entries(1, 6, 10) == []
    r.append([NewMessage(b"fresh", [1])])
    assert [data for *_, data in r.read(1, 6, 10)] == [b"fresh"]


def test_recovery_scans_only_the_tail(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 150)
    s.flush()
    fill(s, 2)
    img = crash_image(tmp_path / "store", tmp_path / "img")
    r = open_store(img)
    assert r.recovery.records_replayed == 6
    assert r.recovery.scanned_from > SMALL.chunk_size


def test_sealed_chunk_without_footer_is_resealed(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 200)
    want = contents(s)
    s.close()
    path = chunk_file(tmp_path / "store", 0)
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, bytes(64), HEADER_SIZE + SMALL.chunk_size)  # footer never written
    os.close(fd)
    (tmp_path / "store" / "checkpoint").unlink()
    r = open_store()
    assert r.recovery.resealed == [0]
    assert contents(r) == want


def _data(ms: list[StoredMessage]) -> list[bytes]:
    return [data for *_, data in ms]


def test_every_read_path_checks_the_crc(open_store: Opener, tmp_path: Path) -> None:
    """A flipped bit is caught by read, by read with a byte budget and by read_matching, in records
    from before this open and in records this process wrote (only the tail cache is trusted)."""
    s = open_store()
    s.create_queue(1)
    old = s.append(msgs(1, 3, prefix="old"))[1].position
    s.close()
    r = open_store(options=replace(SMALL, tail_cache_bytes=0))  # no copy of recent batches in memory
    new = r.append(msgs(1, 3, prefix="new"))[1].position
    r.flush()
    assert [data for *_, data in r.read(1, 0, 100)] == [b"old-0", b"old-1", b"old-2", b"new-0", b"new-1", b"new-2"]
    every = frozenset([tag_hash(b"")])
    for offset, pos in ((1, old), (4, new)):
        with open(chunk_file(tmp_path / "store", 0), "r+b") as f:
            f.seek(HEADER_SIZE + pos + DATA_AT)  # the first byte of the data (no tag, no key, one placement)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x10]))
        with pytest.raises(CorruptChunk):
            r.read(1, offset, 100)
        with pytest.raises(CorruptChunk):
            r.read(1, offset, 100, max_bytes=1 << 20)
        with pytest.raises(CorruptChunk):
            r.read_matching(1, offset, 100, every)
        assert [data for *_, data in r.read(1, offset + 1, 1)] == [b"old-2" if offset == 1 else b"new-2"]


def test_an_empty_queue_opens_its_index_files_on_first_use(open_store: Opener, tmp_path: Path) -> None:
    s = open_store()
    fill(s, 4, queues=(1, 2))
    s.create_queue(3)  # never appended to
    s.set_first_offset(2, s.next_offset(2), durable=True)  # consumed: empty, its index file stays
    s.close()
    stale = tmp_path / "store" / "queues" / f"{2:010d}" / f"{0:020d}.idx"
    with open(stale, "r+b") as f:  # entries past the end, as a torn append leaves them
        f.seek(32 + 16 * 6)
        f.write(((999).to_bytes(8, "little") + bytes(8)) * 3)
    r = open_store()
    indexes = r.queue_indexes
    assert indexes[1].opened and not indexes[2].opened and not indexes[3].opened
    assert r.recovery.records_replayed == 0 and r.next_offset(2) == 6 and r.first_offset(2) == 6
    assert r.index_bytes() > 0 and not indexes[2].opened  # measured by a walk of its directory, not opened
    r.append(msgs(2, 2, prefix="after"))
    assert indexes[2].opened and [data for *_, data in r.read(2, 6, 10)] == [b"after-0", b"after-1"]
    assert len(r.index_entries(2, 6, 10)) == 2
    assert indexes[2].entry(8) == (0, 0, 0)  # the stale entry was cleared when the files opened
    r.append(msgs(3, 1))
    assert r.read(3, 0, 5)[0][-1] == b"m-0"
