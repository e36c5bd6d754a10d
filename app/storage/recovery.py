"""Recovery on open: bring the log and every queue index back to a consistent state.

1. Open every chunk; a chunk whose header is invalid is quarantined (``.bad``), the rest stay.
2. Sealed chunks are trusted through their footer (no scan): restart time follows the tail only.
3. Scan from the recovery point (the checkpoint's position, or the log's start without a checkpoint)
   to the first invalid record (bad length, prefix != suffix, CRC mismatch, zero), in every chunk
   from there to the last. The torn tail and any records after the last END_OF_BATCH record are
   cut (the cut bytes are kept in a ``.tail.bad`` file when valid records followed the bad one, i.e.
   when it looks like corruption rather than a torn write). Unsealed non-last chunks get a footer.
4. Replay: every record after the recovery point re-writes its index entries (entry n of queue q :=
   that record; idempotent), each queue's end follows its placements, and entries beyond a queue's
   recovered end are zeroed.
5. A queue whose index files are missing, truncated or damaged is rebuilt from the whole log.

A queue the checkpoint holds as empty opens its index files only when first used (QueueIndex.files),
so a start with many idle queues costs no file system call per queue.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from isal.isal_zlib import crc32  # the tag hash, as record.py computes it

from . import checkpoint, files
from .chunk import HEADER_SIZE as H
from .chunk import Chunk
from .errors import CorruptChunk, StorageError
from .model import RecoveryReport
from .queue_index import QueueIndex, used_entries
from .record import END_OF_BATCH, iter_records, length_before, placements_at, tag_at

if TYPE_CHECKING:
    from .internals import StoreInternals

log = logging.getLogger("chunkmq.storage")

Runs = dict[int, list[tuple[int, list[int]]]]  # queue id -> [(first offset, flat entries)]


class _Scan:
    """Result of validating one chunk's records from a data offset."""

    def __init__(self) -> None:
        self.batch_end = 0  # data offset after the last complete batch
        self.scan_end = 0  # data offset of the first invalid record
        self.records = 0  # records in complete batches
        self.pending = 0  # records after the last END_OF_BATCH
        self.first_ts = 0
        self.last_ts = 0


def _scan(c: Chunk, local: int, limit: int, runs: Runs | None, only: set[int] | None = None) -> _Scan:
    """Validate records in [local, limit); collect (queue, offset) placements of complete batches."""
    mm = c.mm
    p = H + local  # where validation stopped: after the last valid record
    base = c.base - H  # global position = base + p
    moved = c.moved_positions  # a rewritten chunk: positions from its moved table, and every record
    rewritten = moved is not None  # counts as a whole batch (the collector copies records, not batches)
    pending: list[tuple[int, int, int, int]] = []
    res = _Scan()
    res.batch_end = local
    batch_first_ts = 0
    tags: dict[bytes, int] = {}
    version = c.version
    for off, length, ts, flags, n, _, tl, _ in iter_records(mm, p, H + limit, version):
        if not res.pending:
            batch_first_ts = ts
        res.pending += 1
        if n and runs is not None:
            tag = tag_at(mm, off, version) if tl else b""
            th = tags.get(tag)
            if th is None:
                th = tags[tag] = (crc32(tag) or 1) if tag else 0
            second = length | (th << 32)
            p1 = base + off + 1 if moved is None else c.position_of(off - H) + 1
            for q, o in placements_at(mm, off, version):
                if only is None or q in only:
                    pending.append((q, o, p1, second))
        p = off + length
        if flags & END_OF_BATCH or rewritten:
            res.records += res.pending
            res.pending = 0
            res.batch_end = p - H
            res.first_ts = res.first_ts or batch_first_ts
            res.last_ts = ts
            if runs is not None:
                _add_runs(runs, pending)
                pending.clear()
    res.scan_end = p - H
    return res


def _add_runs(runs: Runs, entries: Iterable[tuple[int, int, int, int]]) -> None:
    for q, o, p1, second in entries:
        r = runs.get(q)
        if r:
            start, flat = r[-1]
            if start + len(flat) // 2 == o:
                flat += (p1, second)
                continue
        else:
            r = runs[q] = []
        r.append((o, [p1, second]))


def _apply_runs(queues: dict[int, QueueIndex], runs: Runs, counted_below: dict[int, int]) -> None:
    """Write replayed entries; entries at offsets >= counted_below[q] are new (added to bytes)."""
    for q, rs in runs.items():
        qi = queues.get(q)
        if qi is None:
            continue  # queue deleted: its records are garbage
        for start, flat in rs:
            if start < qi.first:  # below the floor: retention may have dropped those files
                cut = min(qi.first - start, len(flat) // 2)
                flat = flat[2 * cut :]
                start += cut
            if not flat:
                continue
            qi.write(start, flat)
            stop = start + len(flat) // 2
            qi.next = max(qi.next, stop)
            below = counted_below.get(q, 0)
            if stop > below:
                skip = max(0, below - start)
                qi.bytes += sum([x & 0xFFFFFFFF for x in flat[2 * skip + 1 :: 2]])


def _checkpoint_tail_valid(c: Chunk, local: int) -> bool:
    """Whether a complete record ends exactly at data offset ``local`` (the checkpoint is sound)."""
    return local == 0 or length_before(c.mm, H, H + local, c.version) > 0


def recover(store: StoreInternals) -> RecoveryReport:
    t0 = time.monotonic()
    root, size, opts = store.root, store.chunk_size, store.options
    report = RecoveryReport()
    cp = checkpoint.read(root)
    report.checkpoint_found = cp is not None
    for stale in files.log_dir(root).glob("*" + files.TMP_SUFFIX):
        stale.unlink()

    # 1. chunks
    chunks: dict[int, Chunk] = {}
    highest = -1
    for number, path in files.list_chunks(root):
        highest = max(highest, number)
        try:
            chunks[number] = Chunk.open(path, number, size)
        except CorruptChunk as exc:
            log.error("%s: quarantined", exc)
            files.quarantine(path)
            report.quarantined.append(number)
    for n in sorted(chunks):
        try:
            chunks[n].read_footer()
        except CorruptChunk as exc:  # a rewritten chunk whose moved table is damaged
            log.error("%s: quarantined", exc)
            chunks.pop(n).close()
            files.quarantine(files.chunk_path(root, n))
            report.quarantined.append(n)
    _drop_replaced(chunks, report)
    numbers = sorted(chunks)

    # 2. queues and their checkpointed state
    queues: dict[int, QueueIndex] = {}
    damaged: set[int] = set()
    for q in files.list_queue_ids(root):
        qi = QueueIndex(root, q, opts.index_chunk_entries)
        if cp is not None:
            qi.first, qi.next, qi.bytes = cp.queues.get(q, (0, 0, 0))
            if qi.first == qi.next:  # empty at the recovery point: its files open on first use (a replay, a publish)
                qi.defer_files()
            elif not qi.load_files() or not qi.covers():
                damaged.add(q)
        else:
            qi.load_files()
        queues[q] = qi
    for q in damaged:
        log.warning("queue %d: index damaged, rebuilding it from the log", q)
        queues[q].reset()

    # 3. where to start the scan
    start = cp.position if cp is not None else 0
    if cp is not None and start:
        c = chunks.get(start // size)
        local = start - start // size * size
        if c is not None and not c.sealed and not _checkpoint_tail_valid(c, local):
            log.error("log is shorter than the recovery point %d: rescanning chunk %d", start, c.number)
            start = c.base
    if numbers and start < chunks[numbers[0]].base:
        start = chunks[numbers[0]].base
    report.scanned_from = start

    # 4. scan and replay the tail
    runs: Runs = {}
    last = numbers[-1] if numbers else None
    for n in numbers:
        c = chunks[n]
        if c.end <= start:
            continue
        local = max(0, start - c.base) if not c.rewritten else 0  # (never the case: gc.py replays it whole)
        from_cp = cp is not None and local > 0 and local == cp.position - c.base
        limit = c.data_bytes if c.sealed else size
        res = _scan(c, local, limit, runs)
        if c.sealed:
            if res.scan_end != c.data_bytes or res.pending:
                log.error("chunk %d: invalid record at data offset %d of a sealed chunk", n, res.scan_end)
                del chunks[n]
                c.close()
                files.quarantine(c.path)
                report.quarantined.append(n)
            continue
        # an unsealed chunk: cut the torn tail / incomplete batch
        extent = c.data_extent(res.batch_end)
        if extent > res.batch_end:
            if res.pending:
                report.batches_dropped += 1
            if c.valid_record_after(res.scan_end, size):
                keep = files.tail_quarantine_path(root, n, res.batch_end)
                with os.fdopen(files.create_file(keep, os.O_WRONLY), "wb") as f:
                    f.write(c.read(res.batch_end, extent - res.batch_end))
                log.error("chunk %d: corrupt record at data offset %d followed by valid data; "
                          "the cut tail is kept in %s", n, res.scan_end, keep.name)
            report.bytes_truncated += extent - res.batch_end
            c.rollback(res.batch_end, extent)
        c.data_bytes = res.batch_end
        c.records = (cp.chunk_records if from_cp and cp is not None else 0) + res.records
        c.first_ts = (cp.chunk_first_ts if from_cp and cp is not None else 0) or res.first_ts
        c.last_ts = res.last_ts or c.first_ts
        if n != last:
            c.seal(int(time.time() * 1000))
            report.resealed.append(n)
    end = 0
    if chunks:
        lc = chunks[max(chunks)]
        end = lc.base + lc.data_bytes
    report.records_replayed = sum(len(flat) // 2 for rs in runs.values() for _, flat in rs)
    for q in runs.keys() & queues.keys():  # a deferred queue with records to replay opens as the others
        qi = queues[q]
        if not qi.opened and not qi.load_files():
            log.warning("queue %d: index damaged, rebuilding it from the log", q)
            damaged.add(q)
            qi.reset()
    report.queues_rebuilt = sorted(damaged)

    # 5. indexes: replay, then clamp every queue to the recovered log
    counted = {q: qi.next for q, qi in queues.items()}
    if cp is None:
        for q, qi in queues.items():
            # no record of this queue replayed: its end is what the newest index file says, minus
            # entries that point past the recovered log
            base = max(qi.files) if qi.files else 0
            qi.next = qi.first = qi.first_at_or_after(base, _index_end(qi), end)
            counted[q] = qi.next
            if q in runs:
                qi.first = runs[q][0][0]
                qi.next = 0
                counted[q] = 0
    _apply_runs(queues, runs, counted)
    for qi in queues.values():
        # entries that point at or past the recovered end lost their records (torn or cut tail)
        new_next = qi.first_at_or_after(qi.first, qi.next, end)
        if new_next < qi.next:
            qi.next = new_next
            qi.bytes = qi.bytes_between(qi.first, qi.next)
    if damaged:
        _rebuild(chunks, queues, damaged)
    for q, qi in queues.items():
        if qi.first > qi.next:  # a floor saved past what the log kept: never skip what comes next
            log.warning("queue %d: first offset %d is past the recovered end %d; clamped", q, qi.first, qi.next)
            qi.first = qi.next
        report.index_entries_zeroed += qi.zero_from(qi.next)

    for qi in queues.values():
        qi.recount(size)  # live-byte accounting of the collector (gc.py)

    # 6. the active chunk
    store.adopt(chunks, queues, max(highest + 1, (start + size - 1) // size if start else 0))
    report.end_position = store.end_position
    report.seconds = time.monotonic() - t0
    if report.bytes_truncated or report.quarantined or report.queues_rebuilt or report.resealed:
        log.warning("storage recovery repaired the store: %s", report)
    log.debug("storage recovery: %r", report)
    if cp is None or report.records_replayed or report.index_entries_zeroed:
        try:
            store.flush()  # so the next restart does not replay this tail again
        except StorageError:
            log.exception("could not write the recovery point; the next open replays the tail again")
    return report


def _drop_replaced(chunks: dict[int, Chunk], report: RecoveryReport) -> None:
    """Delete chunk files that a rewritten file replaced: a crash between the collector's commit
    (rename) and its deletions (gc.py, step 4) leaves them; the rewritten file holds their live records."""
    for c in [c for c in chunks.values() if c.rewritten]:
        for n in range(c.number + 1, c.last + 1):
            old = chunks.pop(n, None)
            if old is not None:
                log.warning("chunk %d was replaced by the rewritten chunk %d: deleted", n, c.number)
                old.close()
                old.path.unlink(missing_ok=True)
                report.replaced_deleted.append(n)


def _index_end(qi: QueueIndex) -> int:
    """Without a checkpoint: the offset after the last set entry of the queue's newest index file."""
    if not qi.files:
        return 0
    base = max(qi.files)
    return base + used_entries(qi.files[base].pread(base, qi.capacity))


def _rebuild(chunks: dict[int, Chunk], queues: dict[int, QueueIndex], damaged: set[int]) -> None:
    """Re-create damaged indexes from every record of the log."""
    runs: Runs = {}
    for n in sorted(chunks):
        c = chunks[n]
        _scan(c, 0, c.data_bytes, runs, damaged)
    counted = {q: queues[q].next for q in damaged}
    for q in damaged:
        queues[q].bytes = 0
        counted[q] = 0
    _apply_runs(queues, {q: r for q, r in runs.items() if q in damaged}, counted)
    for q in damaged:
        qi = queues[q]
        qi.bytes = qi.bytes_between(qi.first, qi.next)
