"""The storage engine's value types (app/storage/model.py): batches as columns, what an append
stored, the tag hash, chunk states as a store reports them, and the recovery, retention and collector
reports' log sentences."""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Callable

import pytest

from chunkmq.storage import ChunkState, GcReport, NewMessage, RecoveryReport, RetentionReport, Store, tag_hash
from chunkmq.storage.model import AppendedBatch, MessageColumns


def test_message_columns_leave_out_fields_no_message_has() -> None:
    plain = MessageColumns.of([NewMessage(b"a", [1]), NewMessage(b"b", [1, 2])])
    assert (plain.data, plain.queues, plain.tags, plain.idempotency_keys, plain.flags) == (
        [b"a", b"b"], [[1], [1, 2]], None, None, None)
    tagged = MessageColumns.of([NewMessage(b"a", [1], tag=b"t"), NewMessage(b"b", [1], flags=3)])
    assert tagged.tags == [b"t", b""] and tagged.flags == [0, 3] and len(tagged) == 2


def test_appended_batch_views_by_message() -> None:
    one_each = AppendedBatch(5, [100, 140], [1, 1], [7, 8])
    assert [(a.position, a.timestamp, a.offsets) for a in one_each] == [(100, 5, [(1, 7)]), (140, 5, [(1, 8)])]
    fanned = AppendedBatch(5, [100, 140], [1, 2, 3], [7, 0, 9], counts=[2, 1])
    assert fanned.placements == [[(1, 7), (2, 0)], [(3, 9)]] and fanned[1].offsets == [(3, 9)]


def test_tag_hash_is_never_zero_for_a_tag() -> None:
    assert tag_hash(b"") == 0
    assert tag_hash(b"red") == zlib.crc32(b"red")
    assert all(tag_hash(bytes([i])) != 0 for i in range(256))


def test_chunk_states_as_the_store_reports_them(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.create_queue(1)
    assert store.chunks() == [] or all(c.state is ChunkState.ACTIVE for c in store.chunks())
    for _ in range(10):  # 8 KiB chunks: several roll over
        store.append([NewMessage(b"x" * 500, [1]) for _ in range(10)])
    states = [c.state for c in store.chunks()]
    assert len(states) > 2 and states[-1] is ChunkState.ACTIVE
    assert set(states[:-1]) == {ChunkState.SEALED}
    assert ChunkState.SEALED == "sealed"  # a StrEnum: JSON and templates show the plain word


def test_a_first_start_logs_recovery_as_a_sentence_and_the_fields_at_debug(
        open_store: Callable[..., Store], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="chunkmq.storage")
    open_store()
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(re.fullmatch(r"storage recovery: recovered 0 records with no checkpoint \(log scanned from position 0 "
                            r"to 0\) in \d+\.\d ms; nothing truncated", m) for m in info), info
    assert any(m.startswith("storage recovery: RecoveryReport(checkpoint_found=False") for m in debug), debug


def test_a_recovery_that_repaired_says_what_it_repaired() -> None:
    report = RecoveryReport(checkpoint_found=True, scanned_from=4096, end_position=9000, bytes_truncated=37,
                            records_replayed=5, batches_dropped=1, queues_rebuilt=[3, 4], quarantined=[7],
                            seconds=0.0123)
    assert str(report) == ("recovered 5 records after the checkpoint (log scanned from position 4096 to 9000) "
                           "in 12.3 ms; truncated 37 bytes; 1 incomplete batches dropped; 2 queue indexes rebuilt; "
                           "1 chunks quarantined")


def test_retention_and_the_collector_log_sentences_and_the_fields_at_debug(
        open_store: Callable[..., Store], caplog: pytest.LogCaptureFixture) -> None:
    s = open_store()
    s.create_queue(1)
    s.create_queue(2)
    s.append([NewMessage(b"slow-0", [2])])  # queue 2 pins chunk 0 with one message: sparse once the rest goes
    for i in range(60):
        s.append([NewMessage(f"fast{i}-{j}".encode() + b"p" * 60, [1]) for j in range(5)])
    caplog.set_level(logging.DEBUG, logger="chunkmq.storage")
    kept = s.retain({1: s.next_offset(1), 2: 0})
    collected = s.collect()
    assert kept.chunks_deleted and collected.rewrites == 1
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert f"retention: deleted {len(kept.chunks_deleted)} chunk files and {kept.index_files_deleted} index files, " \
           f"freeing {kept.bytes_freed} bytes; the first offset of 1 queues moved" in info, info
    assert any(re.fullmatch(rf"collector: rewrote 1 chunk files into 1, copying {collected.bytes_copied} bytes of "
                            rf"live records and freeing {collected.bytes_freed} bytes, in \d+\.\d ms", m)
               for m in info), info
    assert f"retention: {kept!r}" in debug and f"collector: {collected!r}" in debug, debug
    assert not any("Report(" in m for m in info), info


def test_a_retention_that_dropped_and_a_merge_say_how_many() -> None:
    report = RetentionReport(chunks_deleted=[3, 4], index_files_deleted=1, bytes_freed=16384,
                             first_offsets={1: 10, 2: 7}, dropped={1: (10, 900), 2: (7, 600)})
    assert str(report) == ("deleted 2 chunk files and 1 index files, freeing 16384 bytes; the first offset of 2 "
                           "queues moved; dropped 17 messages (1500 bytes) of 2 queues to free disk space")
    merged = GcReport(rewrites=1, chunks_replaced=[5, 6, 7], bytes_copied=3000, bytes_freed=20000, seconds=0.0042)
    assert str(merged) == ("rewrote 3 chunk files into 1, copying 3000 bytes of live records and freeing 20000 bytes, "
                           "in 4.2 ms")
