"""The collector: rewrite sealed chunks that slow queues pin with little live data.

A chunk file can only be deleted when no queue needs any record in it, so one slow queue with a
trickle of messages keeps every chunk it has a record in, and with it everything else those chunks
hold. The collector copies the *live* records (at or above some queue's floor) of such chunks into
one new file and retires the old files.

What moves and what does not: a record keeps its global position, which is its message id and what
the queue indexes hold; no index entry is rewritten. The new file carries a moved table (chunk.py)
that maps each position to the record's place in it, and it takes the number of the first chunk it
replaces; the numbers of the others are aliases of it in the store's chunk map. Positions still grow
with offsets (the file stands exactly for the positions of the chunks it replaces), so retention and
every binary search work unchanged.

When: after each retain() (the collector thread is woken; StoreOptions.gc_threshold > 0), or on
demand with Store.collect(). A sealed chunk is *sparse* when its live bytes (Store.live_bytes, kept
by the queues without reading the log) are below threshold x chunk_size. A run of neighbouring
sparse files (no other file between them) whose live bytes fit one chunk is merged into one file;
a single sparse file is rewritten alone only if that frees at least half of what it takes. With
the default threshold 0.5 no two neighbouring files are both sparse after a pass (two of them would
fit one chunk together), so the file count stays below 2 x live bytes / (0.5 x chunk_size) + 1.

Order of operations for one rewrite (the invariant each step keeps is on the right):

  0. (only when the plan found work) raise each queue's     a crash never brings back a floor below
     first offset to its floor (what a rewrite drops stops  what the rewrite drops, and no replay
     being readable, as when retention deletes a chunk);    ever starts inside a rewritten chunk
     flush(): floors and the recovery point are durable
     before the live set is chosen, from those floors.
  1. copy the live records into ``<first>.chunk.gc.tmp``;   crash: the .tmp is deleted on open (all
     header (REWRITTEN), records, moved table, footer;      *.tmp are), the old files are untouched
     fsync it.
  2. under the writer lock: check every source is still   retention or a quarantine took a source
     in the chunk map, else drop the .tmp and stop.         meanwhile: nothing happened
  3. rename the .tmp over ``<first>.chunk``: the commit.    crash after it: the new file replaces
     Map every replaced number to the new file.             the first source; the other sources
                                                            still exist and hold the same records;
                                                            recovery deletes files whose number a
                                                            rewritten file replaces
  4. fsync the directory, delete the other sources'         crash: as in 3
     files, fsync the directory.

Readers never wait: a reader that found an old Chunk before step 3 keeps reading its mmap, which
stays valid after the file is replaced or deleted; the mapping is released when the last reader
drops it (the collector closes only the file descriptor). Both files serve the same positions with
the same bytes, so whichever a reader sees, it reads the right record.

Low priority: the collector thread spends at most ``gc_duty`` of the wall time in CPU time of its
own (it sleeps the rest, which also gives the GIL back to the publish path); it holds the writer
lock only for step 3. After a merge with the record format 2 branch: a rewritten file must carry its
sources' record format version, so a run must not mix chunks of two versions.
Records are opaque here: they are found through the indexes (position, length), checked with
record.py's ``record_length`` (length and CRC) and copied as bytes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from . import files
from .chunk import HEADER_SIZE as H
from .chunk import Chunk, moved_table_size
from .errors import CorruptChunk, StorageError, StoreClosed
from .model import GcReport
from .queue_index import ENTRY
from .record import record_length, timestamp_at

if TYPE_CHECKING:
    from .internals import StoreInternals

log = logging.getLogger("chunkmq.storage")

GC_SUFFIX = ".gc" + files.TMP_SUFFIX  # <first>.chunk.gc.tmp: a rewrite in progress


class _Aborted(Exception):
    """A source went away under the rewrite (retention, quarantine, a deleted queue): try later."""


class _Pacer:
    """Sleep so that the collector's own CPU time is at most ``duty`` of the wall time, in slices of
    a few milliseconds. CPU time of this thread, not wall time: time spent waiting for the GIL while
    the publish path holds it is not work and must not lengthen the sleeps."""

    def __init__(self, store: StoreInternals, duty: float, stop: threading.Event | None,
                 run: threading.Event | None = None) -> None:
        self.store = store
        self.duty = duty
        self.stop = stop
        self.run = run  # cleared: wait (bench/gc.py alternates windows with and without the collector)
        self.started = time.thread_time()
        self.n = 0

    def tick(self) -> None:
        self.n += 1
        if self.n & 63:
            return
        self.check()

    def check(self) -> None:
        if self.run is not None:
            self.run.wait()
        if self.store.closed or (self.stop is not None and self.stop.is_set()):
            raise StoreClosed("the store is closing")
        if self.duty >= 1:
            return
        worked = time.thread_time() - self.started
        if worked >= 0.002:
            time.sleep(worked * (1 / self.duty - 1))
            self.started = time.thread_time()


def plan(store: StoreInternals, threshold: float, live: dict[int, int], durable: int) -> list[list[Chunk]]:
    """Runs of neighbouring sealed files to rewrite into one file each (see the module docstring),
    among the files wholly below ``durable``, a position the recovery point has reached: recovery
    never replays records of a file the collector may rewrite (a chunk sealed after step 0 waits
    for the next pass)."""
    size = store.chunk_size
    runs: list[list[Chunk]] = []
    run: list[Chunk] = []
    need = 0  # bytes the run's file will take: live records and their moved table, estimated

    def close() -> None:
        if not sum(live.get(c.number, 0) for c in run):
            return  # nothing live: retention deletes these files
        if len(run) > 1 or (run and _worth_alone(run[0], live.get(run[0].number, 0), threshold, size)):
            runs.append(list(run))

    for c in store.chunk_files():
        n = live.get(c.number, 0)
        pinned = store.pinned_from is not None and c.end > store.pinned_from  # delayed records (due_index.py)
        sparse = c.sealed and c is not store.active_chunk and c.end <= durable and n < threshold * size and not pinned
        est = n + moved_table_size(c.records * n // max(1, c.data_bytes) + 1) + 8
        if run and any(m in store.remote for m in range(run[-1].last + 1, c.number)):
            close()  # an evicted chunk between them: a merge would cover its numbers
            run, need = [], 0
        if sparse and run and need + est <= size:
            run.append(c)
            need += est
            continue
        close()
        run, need = ([c], est) if sparse else ([], 0)
    close()
    return runs


def _worth_alone(c: Chunk, live: int, threshold: float, size: int) -> bool:
    """A lone sparse file is rewritten when at least half of what it takes is garbage."""
    if c.moved_positions is None:
        return True  # a preallocated chunk takes chunk_size; its live bytes are below threshold of it
    return live < threshold * c.data_bytes


def collect(store: StoreInternals, threshold: float, duty: float, stop: threading.Event | None = None,
            run: threading.Event | None = None) -> GcReport:
    """One pass: every run the plan finds, rewritten in order (step 0 of the docstring first).
    ``stop`` set: the pass ends at its next step; ``run`` cleared: the pass waits at its next step."""
    t0 = time.perf_counter()
    report = GcReport()
    runs = plan(store, threshold, store.live_bytes(), store.end_position)
    if not runs:
        return report
    with store.writer_lock:
        store.check_open()
        floors = {}
        for q, qi in store.queue_indexes.items():
            # What a rewrite drops below a queue's floor stops being readable: first rises to the
            # floor, as retention does when it deletes a whole chunk.
            if qi.floor > qi.first:
                qi.bytes -= qi.bytes_between(qi.first, qi.floor)
                qi.first = qi.floor
                store.first_moved(q)
            floors[q] = qi.first
    store.flush()  # step 0: the floors above (or higher ones) and the recovery point (past the runs) are durable
    pacer = _Pacer(store, duty, stop, run)
    for sources in runs:
        pacer.check()
        try:
            _rewrite(store, sources, floors, pacer, report)
        except _Aborted as exc:
            log.info("collector: rewrite of chunks %d..%d given up: %s", sources[0].number, sources[-1].last, exc)
    report.seconds = time.perf_counter() - t0
    if report.rewrites:
        log.info("collector: %s", report)
        log.debug("collector: %r", report)
    return report


def _live_records(store: StoreInternals, run: list[Chunk], floors: dict[int, int]) -> list[tuple[int, int]]:
    """(position, length) of every record some queue needs in the run's positions, ascending."""
    lo, hi = run[0].base, run[-1].end
    found: dict[int, int] = {}
    for q, qi in list(store.queue_indexes.items()):
        floor = floors.get(q)
        if floor is None:
            continue  # created after the pass started: it has nothing in sealed chunks
        a = qi.first_at_or_after(floor, qi.next, lo)
        b = qi.first_at_or_after(a, qi.next, hi)
        for p1, length, _ in ENTRY.iter_unpack(qi.raw(a, b - a)):
            if p1:
                found[p1 - 1] = length
    return sorted(found.items())


def _rewrite(store: StoreInternals, run: list[Chunk], floors: dict[int, int], pacer: _Pacer, report: GcReport) -> None:
    size = store.chunk_size
    number, last = run[0].number, run[-1].last
    version = run[0].version  # records are copied verbatim: the new file keeps their record format
    if any(c.version != version for c in run):
        raise _Aborted("the chunks hold different record formats")
    try:
        records = _live_records(store, run, floors)
    except ValueError as exc:  # a queue deleted under us closed its index
        raise _Aborted("a queue was deleted") from exc
    parts: list[bytes] = []
    positions: list[int] = []
    used = 0
    chunks = store.chunk_map
    sources = {id(c) for c in run}
    first_ts = last_ts = 0
    try:
        for pos, length in records:
            c = chunks.get(pos // size)
            if c is None or id(c) not in sources:
                raise _Aborted(f"the chunk of position {pos} went away")
            local = H + c.local_of(pos)
            if local < H:
                continue  # lost before (a quarantine): nothing to copy
            mm = c.mm
            # length and CRC checked: a damaged record is never copied into a file that looks sound
            if record_length(mm, local, H + c.data_bytes, version) != length:
                raise CorruptChunk(f"record at {pos} fails validation", chunk=c.number, position=pos)
            parts.append(mm[local : local + length])
            positions.append(pos)
            used += length
            if not first_ts:
                first_ts = timestamp_at(mm, local, version)
            pacer.tick()
        if positions:  # records are in log order: timestamps never decrease along it
            c = chunks[positions[-1] // size]
            last_ts = timestamp_at(c.mm, H + c.local_of(positions[-1]), version)
    except ValueError as exc:  # closed by retention
        raise _Aborted("a source chunk was deleted") from exc
    if used + 8 + moved_table_size(len(parts)) > size:
        raise _Aborted("the live records do not fit one chunk")  # the plan's estimate was off: retry later
    path = files.chunk_path(store.root, number)
    tmp = files.with_suffix(path, GC_SUFFIX)
    # step 1: a complete, fsynced file under a temporary name
    Chunk.write_rewritten(tmp, number, last, size, parts, positions, (first_ts, last_ts),
                          run[0].created_ms, int(time.time() * 1000), version)
    freed = sum(_allocated(c.path) for c in run) - _allocated(tmp)
    with store.writer_lock:
        # step 2: the sources must still be what the copy was made from
        if store.closed or any(chunks.get(c.number) is not c for c in run):
            tmp.unlink(missing_ok=True)
            raise _Aborted("a source chunk was deleted or quarantined")
        # step 3: the commit
        try:
            os.rename(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"replacing chunk {number}: {exc}") from exc
        new = Chunk.open(path, number, size)
        new.read_footer()
        new.release_fd()
        for c in run:
            store.forget(c)
            c.release_fd()  # the mmap stays for readers that still hold the old Chunk
        for n in range(number, last + 1):
            chunks[n] = new
    # step 4
    files.fsync_dir(path.parent)
    for c in run[1:]:
        c.path.unlink(missing_ok=True)
    files.fsync_dir(path.parent)
    report.rewrites += 1
    report.chunks_replaced += [c.number for c in run]
    report.bytes_copied += used
    report.bytes_freed += max(0, freed)


def _allocated(path: os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


class Collector:
    """The collector thread: one pass each time it is woken (after retention), paced to ``duty``."""

    def __init__(self, store: StoreInternals, threshold: float, duty: float) -> None:
        self._store = store
        self._threshold = threshold
        self._duty = duty
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chunkmq-gc", daemon=True)
        self.passes = 0
        self.last: GcReport | None = None

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.last = collect(self._store, self._threshold, self._duty, self._stop)
                self.passes += 1
            except StoreClosed:
                return
            except Exception:  # a failed pass (a full disk, corruption) is retried after the next retention
                log.exception("collector pass failed")
