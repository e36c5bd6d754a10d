"""The write path (app/storage/store_writes.py): append, publish_one, chunk roll, caps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import chunkmq.storage as storage
from chunkmq.storage import (
    BatchTooLarge,
    MessageTooLarge,
    NewMessage,
    StorageFull,
    Store,
    StoreClosed,
    StoreOptions,
    UnknownQueue,
)
from chunkmq.storage.chunk import Chunk
from tests.storage.conftest import SMALL, msgs

Opener = Callable[..., Store]


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
