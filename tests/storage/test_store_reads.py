"""The read path (app/storage/store_reads.py): by offset, by tag, by timestamp, scans."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from chunkmq.storage import (
    FsyncMode,
    NewMessage,
    Store,
    StoreOptions,
    reader,
    tag_hash,
)
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_read_limits_and_tag_filter(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    s.append([NewMessage(b"d" * 10, [1], tag=b"a" if i % 3 == 0 else b"b") for i in range(30)])
    assert [offset for offset, *_ in s.read(1, 5, 4)] == [5, 6, 7, 8]
    assert len(s.read(1, 0, 100, max_bytes=35)) == 3
    assert len(s.read(1, 0, 100, max_bytes=1)) == 1  # at least one
    only_a = frozenset([tag_hash(b"a")])
    got, next_scan = s.read_matching(1, 0, 4, only_a)
    assert [offset for offset, *_ in got] == [0, 3, 6, 9] and next_scan == 10
    got, next_scan = s.read_matching(1, 1, 100, only_a, max_scan=4)
    assert [offset for offset, *_ in got] == [3] and next_scan == 5
    got, next_scan = s.read_matching(1, 0, 100, frozenset([tag_hash(b"zzz")]))
    assert got == [] and next_scan == 30


def test_offset_for_timestamp_binary_search(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    first_ts = []
    for i in range(6):
        first_ts.append(s.append(msgs(1, 5, prefix=str(i)))[0].timestamp)
        threading.Event().wait(0.004)
    for i, ts in enumerate(first_ts):
        if i == 0 or first_ts[i - 1] < ts:
            assert s.offset_for_timestamp(1, ts) == 5 * i
    assert [r.timestamp >= first_ts[3] for r in s.scan_since(first_ts[3])] == [True] * 15


def test_scan_yields_every_record_in_order(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    s.create_queue(2)
    positions = []
    for i in range(50):
        positions += [a.position for a in s.append([NewMessage(f"{i}".encode(), [1 + i % 2])] * 3)]
    assert [r.position for r in s.scan()] == positions
    assert [r.position for r in s.scan(positions[30])] == positions[30:]


def test_reads_copy_out_of_the_chunk(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for _ in range(10):
        s.append(msgs(1, 20, prefix="r" * 30))
    got = s.read(1, 0, 5)
    s.retain({1: 200})
    s.close()
    assert got[0][-1].startswith(b"r" * 30)  # still valid after the chunks are gone


FORMAT1 = Path(__file__).parent.parent / "fixtures" / "format1" / "broker_dir" / "store"


def test_a_store_written_in_record_format_1_stays_readable(tmp_path: Path) -> None:
    """tests/fixtures/format1: chunks of version 1 are read (every CRC checked) and never appended to;
    new records go to a new chunk of format 2, and both read back in one call."""
    copy = shutil.copytree(FORMAT1, tmp_path / "store")
    options = StoreOptions(chunk_size=8192, index_chunk_entries=64, fsync=FsyncMode.NEVER)
    with Store.open(copy, options) as s:
        assert s.recovery.bytes_truncated == 0 and not s.recovery.quarantined
        assert [c.number for c in s.chunks()] == [0, 1, 2, 3]
        plain = s.read(1, 0, 1000)
        assert [o for o, *_ in plain] == list(range(100))
        assert all(data.startswith(b'"exchange":""') and b"plain message %03d" % o in data for o, *_, data in plain)
        assert [len(s.read(q, 0, 1000)) for q in (2, 3)] == [6, 6]
        tagged = s.read_matching(2, 0, 10, frozenset({tag_hash(b"created")}))[0]
        assert [(o, tag) for o, _, _, _, tag, _ in tagged] == [(1, b"created")]
        records = list(s.scan())
        assert len(records) == 106 and sum(len(r.placements) for r in records) == 112
        assert [r.idempotency_key for r in records if r.idempotency_key] == [b"x/fan/key-1"]
        last = s.end_position
        appended = s.append([NewMessage(b"new", [1])])[0]
        assert appended.position == 4 * 8192 and appended.offsets == [(1, 100)]  # chunk 3 (format 1) was sealed
        assert s.read_at(records[0].position).data == records[0].data
    with Store.open(copy, options) as s:
        got = s.read(1, 99, 10)
        assert [(o, data[-3:]) for o, *_, data in got] == [(99, b'xx"'), (100, b"new")]
        assert s.chunks()[3].data_bytes == last - 3 * 8192
        assert {c.number: c.path.exists() for c in s.chunks()} == {0: True, 1: True, 2: True, 3: True, 4: True}
        assert sum(1 for _ in reader.read_chunk(s.chunks()[0].path)) > 0
