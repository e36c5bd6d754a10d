from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import chunkmq.storage as storage
from chunkmq.storage import (
    BatchTooLarge,
    FsyncMode,
    MessageTooLarge,
    NewMessage,
    StorageError,
    StorageFull,
    Store,
    StoreClosed,
    StoreOptions,
    UnknownQueue,
    reader,
    tag_hash,
)
from chunkmq.storage.chunk import HEADER_SIZE, Chunk
from chunkmq.storage.record import FIELDS_AT
from tests.storage.conftest import SMALL, msgs

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


def test_chunk_roll_over_at_the_boundary(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    data_size = SMALL.chunk_size
    # one record is 14 framing (long) + 8 header + 3 placement (queue id < 256, offset < 65536) + data bytes;
    # fill chunk 0 exactly
    record = 14 + 8 + 3
    quarter = data_size // 4 - record
    filled = [s.append([NewMessage(bytes([65 + i]) * quarter, [1])])[0] for i in range(4)]
    assert [a.position for a in filled] == [i * data_size // 4 for i in range(4)]
    assert s.end_position == data_size
    third = s.append([NewMessage(b"z", [1])])
    assert third[0].position == data_size  # chunk 1, data offset 0
    info = s.chunks()
    assert [(c.number, c.state, c.data_bytes) for c in info] == [
        (0, "sealed", data_size), (1, "active", 6 + 8 + 3 + 1)]  # a short record
    # a batch that does not fit the rest goes whole into the next chunk
    fits = s.append(msgs(1, 60, prefix="b" * 70))
    assert {a.position // data_size for a in fits} == {1}
    end_of_1 = s.end_position - data_size
    big = s.append(msgs(1, 60, prefix="c" * 70))
    assert {a.position // data_size for a in big} == {2}
    assert big[0].position == 2 * data_size
    assert [(c.number, c.state, c.data_bytes) for c in s.chunks()][1] == (1, "sealed", end_of_1)
    assert [data for *_, data in s.read(1, 0, 5)] == [c * quarter for c in (b"A", b"B", b"C", b"D")] + [b"z"]
    assert len(s.read(1, 5, 1000)) == 120


@pytest.mark.parametrize("how", ["append", "publish_one"])
def test_after_a_roll_whose_write_failed_the_next_append_goes_at_the_new_chunk_s_start(
        open_store: Opener, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A full disk can refuse the first write into a chunk the append just rolled to: the log's end
    then still lies in the sealed chunk before it, and the next record must start the new one (it
    once went at a negative offset into it)."""
    s = open_store()
    s.create_queue(1)
    s.append(msgs(1, 60, prefix="a" * 70))
    first = s.chunks()[-1].number
    refused = [0]
    write = Chunk.write

    def full_once(chunk: Chunk, local: int, buf: bytes) -> None:
        if chunk.number > first and not refused[0]:
            refused[0] += 1
            raise StorageFull("no space left on device (made up by the test)")
        write(chunk, local, buf)

    monkeypatch.setattr(Chunk, "write", full_once)
    with pytest.raises(StorageFull):
        s.append(msgs(1, 60, prefix="b" * 70))  # does not fit the rest: rolls, then fails
    assert refused == [1] and s.next_offset(1) == 60
    if how == "append":
        position = s.append(msgs(1, 2, prefix="c"))[0].position
    else:
        position, _ = s.publish_one(b"c-0", 1)
    assert position == (first + 1) * SMALL.chunk_size
    assert next(data for *_, data in s.read(1, 60, 10)) == b"c-0"
    s.close()
    r = open_store()
    assert [data for *_, data in r.read(1, 59, 10)][:2] == [b"a" * 70 + b"-59", b"c-0"]


def test_many_queues_and_fan_out(open_store: Opener) -> None:
    s = open_store()
    queues = list(range(100, 140))
    for q in queues:
        s.create_queue(q)
    expected: dict[int, list[bytes]] = {q: [] for q in queues}
    for i in range(200):
        placed = [queues[(i + k) % len(queues)] for k in range(1 + i % 4)]
        s.append([NewMessage(f"m{i}".encode(), placed)])
        for q in placed:
            expected[q].append(f"m{i}".encode())
    for q in queues:
        got = s.read(q, 0, 1000)
        assert [data for *_, data in got] == expected[q]
        assert [offset for offset, *_ in got] == list(range(len(expected[q])))
    # a fan-out message is stored once: same position in every queue
    rec = s.read_at(s.read(queues[0], 0, 1)[0][1])
    assert len(rec.placements) == 1
    fan = s.append([NewMessage(b"all", queues)])
    assert {s.read(q, s.next_offset(q) - 1, 1)[0][1] for q in queues} == {fan[0].position}


def test_limits_and_errors(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    end = s.end_position
    with pytest.raises(MessageTooLarge):
        s.append([NewMessage(b"x" * (SMALL.max_message_bytes + 1), [1])])
    with pytest.raises(BatchTooLarge):
        s.append(msgs(1, 400, prefix="y" * 20))
    with pytest.raises(UnknownQueue):
        s.append([NewMessage(b"x", [1]), NewMessage(b"x", [99])])
    with pytest.raises(UnknownQueue):
        s.read(99, 0, 1)
    assert s.end_position == end and s.next_offset(1) == 0  # nothing of a rejected batch
    assert len(s.append([])) == 0
    s.close()
    with pytest.raises(StoreClosed):
        s.append(msgs(1, 1))
    s.close()  # idempotent


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


def test_first_offset_and_timestamps(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    stamps = []
    for i in range(20):
        stamps.append(s.append(msgs(1, 2, prefix=str(i)))[0].timestamp)
        if i % 5 == 4:
            threading.Event().wait(0.003)
    head_bytes = sum(e.length for e in s.index_entries(1, 0, 10))
    assert s.set_first_offset(1, 10) == (10, head_bytes)
    assert s.set_first_offset(1, 5) == (0, 0)  # never down
    assert s.read(1, 0, 1)[0][0] == 10
    assert s.set_first_offset(1, 10**9, durable=True)[0] == 30  # clamped to the end
    assert s.first_offset(1) == s.next_offset(1) == 40 and s.queue_bytes(1) == 0
    s.append(msgs(1, 3))
    ts = s.timestamp_of(1, 40)
    assert ts is not None and s.timestamp_of(1, 0) is None
    assert s.offset_for_timestamp(1, 0) == 40
    assert s.offset_for_timestamp(1, ts + 10**6) == 43


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


def test_statistics(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for _ in range(40):
        s.append(msgs(1, 5, prefix="x" * 58))  # records of about 77 bytes
    s.read(1, 0, 1000)  # from the chunk files
    s.read(1, 195, 5)  # a tail reader: from the cache of recent batches
    info = s.chunks()
    assert sum(c.records for c in info) == 200
    assert sum(c.writes for c in info) == 40
    assert sum(c.reads_cache for c in info) == 5 and sum(c.reads_disk for c in info) == 200
    assert all(c.created_ms > 0 and c.first_timestamp > 0 for c in info)
    assert s.disk_bytes() >= sum(c.data_bytes for c in info)


def test_durable_group_commit_with_concurrent_writers(open_store: Opener, tmp_path: Path) -> None:
    s = open_store(tmp_path / "always", StoreOptions(chunk_size=1 << 20, fsync=FsyncMode.ALWAYS))
    s.create_queue(1)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(50):
                s.append([NewMessage(f"{k}-{i}".encode(), [1])])
                s.durable(s.end_position).result(timeout=10)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert s.next_offset(1) == 200
    assert s._flusher.synced >= s.end_position
    assert s._flusher.syncs <= 200  # concurrent waiters shared fsyncs
    assert s.durable(0).done()


def test_durable_in_interval_mode_is_immediate(open_store: Opener, tmp_path: Path) -> None:
    s = open_store(tmp_path / "interval", StoreOptions(chunk_size=1 << 20, fsync_interval_ms=10))
    s.create_queue(1)
    s.append(msgs(1, 3))
    assert s.durable(s.end_position).done()


def test_reads_copy_out_of_the_chunk(open_store: Opener) -> None:
    s = open_store()
    s.create_queue(1)
    for _ in range(10):
        s.append(msgs(1, 20, prefix="r" * 30))
    got = s.read(1, 0, 5)
    s.retain({1: 200})
    s.close()
    assert got[0][-1].startswith(b"r" * 30)  # still valid after the chunks are gone


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


def test_caps_refuse_a_whole_batch_with_its_exact_sizes(tmp_path: Path) -> None:
    s = storage.Store.open(tmp_path / "s", StoreOptions(chunk_size=64 * 1024))
    s.create_queue(1)
    s.create_queue(2)
    batch = [NewMessage(b"x" * 100, [1]), NewMessage(b"y" * 300, [1, 2])]
    size = storage.record_size(100, 1, queue_id=1, offset=0) + storage.record_size(300, 2)
    end = s.end_position
    with pytest.raises(storage.QueueCapReached) as refused:
        s.append(batch, {1: storage.QueueCap(None, size - 1)})
    assert (refused.value.queue_id, refused.value.unit, refused.value.limit) == (1, "bytes", size - 1)
    with pytest.raises(storage.QueueCapReached, match="more than its 1 messages"):
        s.append(batch, {2: storage.QueueCap(None, None), 1: storage.QueueCap(1, None)})
    assert (s.end_position, s.next_offset(1), s.next_offset(2)) == (end, 0, 0)  # nothing written
    appended = s.append(batch, {1: storage.QueueCap(2, size)})  # exactly the cap
    assert s.queue_bytes(1) == size and len(appended) == 2
    s.close()


def test_admit_sees_the_space_of_a_batch_before_it_is_written(tmp_path: Path) -> None:
    s = storage.Store.open(tmp_path / "s", StoreOptions(chunk_size=64 * 1024))
    s.create_queue(1)
    s.create_queue(2)
    seen: list[storage.BatchSpace] = []

    def refuse(space: storage.BatchSpace) -> None:
        seen.append(space)
        raise RuntimeError("no room")

    batch = [NewMessage(b"x" * 100, [1]), NewMessage(b"y", [1, 2])]
    with pytest.raises(RuntimeError):
        s.append(batch, admit=refuse)
    assert s.end_position == 0 and s.next_offset(1) == 0
    s.append(batch, admit=seen.append)
    assert seen == [storage.BatchSpace(s.end_position, True, 3, 2)] * 2
    s.append(batch, admit=seen.append)
    assert seen[-1].new_chunk is False
    s.close()


def test_a_recovery_point_writes_only_the_queues_that_changed(open_store: Opener, tmp_path: Path) -> None:
    from chunkmq.storage import checkpoint

    s = open_store()
    for q in range(1, 51):
        s.create_queue(q)
        s.append(msgs(q, 2))
    s.flush()  # a record of the 50 queues, after the full file the open wrote
    journal = s.root / checkpoint.JOURNAL
    size = journal.stat().st_size
    assert size == 28 + 36 + 50 * 28 + 4  # the header, then one record
    s.flush()
    assert journal.stat().st_size == size  # nothing changed: nothing written
    s.append(msgs(7, 3))
    s.set_first_offset(9, 1)
    s.flush()
    assert journal.stat().st_size == size + 36 + 2 * 28 + 4  # one record: queues 7 and 9 only
    s.delete_queue(11)  # flushes: queue 11 leaves the recovery point
    # the full file and its journal give what a full recovery point of the live store holds
    live = {q: (s.first_offset(q), s.next_offset(q), s.queue_bytes(q)) for q in s.queue_ids()}
    cp = checkpoint.read(s.root)
    assert cp is not None and cp.queues == live and cp.position == s.end_position
    crashed = open_store(shutil.copytree(s.root, tmp_path / "crashed"))
    assert crashed.recovery.checkpoint_found and crashed.recovery.records_replayed == 0
    assert {q: (crashed.first_offset(q), crashed.next_offset(q), crashed.queue_bytes(q))
            for q in crashed.queue_ids()} == live


def test_changed_queues_names_what_changed_since_each_readers_last_call(open_store: Opener) -> None:
    s = open_store()
    for q in (1, 2, 3):
        s.create_queue(q)
    assert s.changed_queues("a") == {1, 2, 3}  # the first call: every queue
    assert s.changed_queues("a") == set()
    s.append(msgs(2, 1))
    s.create_queue(4)
    assert s.changed_queues("b") == {1, 2, 3, 4}
    assert s.changed_queues("a") == {2, 4}
    s.delete_queue(1)
    s.set_first_offset(2, 1)
    assert s.changed_queues("a") == {1, 2} and s.changed_queues("b") == {1, 2}


def test_held_sums_every_queue_and_counts_again_only_those_that_changed(open_store: Opener) -> None:
    s = open_store()
    for q in (1, 2, 3):
        s.create_queue(q)
        s.append(msgs(q, q))

    def every() -> tuple[int, int]:
        return (sum(s.next_offset(q) - s.first_offset(q) for q in s.queue_ids()),
                sum(s.queue_bytes(q) for q in s.queue_ids()))

    assert s.held() == every() and s.held()[0] == 6
    s.append(msgs(2, 4))
    s.set_first_offset(3, 2)
    s.delete_queue(1)
    assert s.held() == every() and s.held()[0] == 2 + 4 + 1


def test_publish_one_writes_what_publish_writes(tmp_path: Path) -> None:
    """One record into one queue by publish_one and by publish, with and without flags: the same
    records, answers, counters, refusals and admitted space, across chunk roll-overs (SMALL's chunks
    hold a few dozen records)."""
    twins = [Store.open(tmp_path / name, SMALL) for name in ("one", "batch")]
    one, batch = twins
    for s in twins:
        s.create_queue(1)
        s.create_queue(2)
    spaces: list[list[storage.BatchSpace]] = [[], []]
    for i in range(300):
        data, queue, flags = f"message {i}".encode() * (1 + i % 7), 1 + i % 2, i % 3
        position, offset = one.publish_one(data, queue, None, spaces[0].append, flags)
        appended = batch.append(storage.MessageColumns([data], [(queue,)], flags=[flags]), None, spaces[1].append)
        assert (position, offset) == (appended.positions[0], appended.offsets[0])
    assert spaces[0] == spaces[1]
    cap = storage.QueueCap(one.next_offset(1), None)  # full: both refuse, nothing written
    for s, publish in ((one, lambda: one.publish_one(b"x", 1, cap)),
                       (batch, lambda: batch.append(storage.MessageColumns([b"x"], [(1,)]), {1: cap}))):
        end = s.end_position
        with pytest.raises(storage.QueueCapReached):
            publish()
        assert s.end_position == end
    with pytest.raises(UnknownQueue):
        one.publish_one(b"x", 3)
    with pytest.raises(MessageTooLarge):
        one.publish_one(b"x" * 4096, 1)
    for q in (1, 2):  # the same, but for the clock's timestamps
        assert [m[:2] + m[3:] for m in one.read(q, 0, 1000)] == [m[:2] + m[3:] for m in batch.read(q, 0, 1000)]
        assert [(e.length, e.tag_hash) for e in one.index_entries(q, 0, 1000)] == \
            [(e.length, e.tag_hash) for e in batch.index_entries(q, 0, 1000)]
        assert (one.queue_bytes(q), one.next_offset(q)) == (batch.queue_bytes(q), batch.next_offset(q))
    assert one.end_position == batch.end_position and len(one.chunks()) == len(batch.chunks()) >= 3
    assert [(r.position, r.data, r.placements) for r in one.scan()] == \
        [(r.position, r.data, r.placements) for r in batch.scan()]
    for s in twins:
        s.close()


def test_when_durable_calls_back_on_the_loop_after_the_fsync_in_fsync_always_only(tmp_path: Path) -> None:
    always = Store.open(tmp_path / "always", StoreOptions(fsync=FsyncMode.ALWAYS))
    interval = Store.open(tmp_path / "interval", StoreOptions(fsync=FsyncMode.INTERVAL))

    async def publish(s: Store) -> tuple[bool, list[BaseException | None]]:
        s.create_queue(1)
        s.publish_one(b"x", 1)
        called: list[BaseException | None] = []
        waits = s.when_durable(s.end_position, asyncio.get_running_loop(), called.append)
        for _ in range(1000):
            if called or not waits:
                break
            await asyncio.sleep(0.01)
        return waits, called

    assert asyncio.run(publish(always)) == (True, [None])
    assert always._flusher.synced >= always.end_position
    assert asyncio.run(publish(interval)) == (False, [])  # durable by the interval's fsync, not awaited
    always.close()
    interval.close()
