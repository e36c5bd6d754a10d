"""Retention: delete log chunks and index files that no queue needs any more.

A sealed chunk is needed while some queue has an index entry at or above its floor pointing into
it. Positions grow with offsets inside a queue, so "does queue q point into chunk c" is a binary
search over q's entries in [floor, next). Then, optionally (the broker's ``drop_oldest`` disk budget
policy), the oldest sealed chunks go regardless until ``free_bytes`` are freed (the queues that lose
messages are reported). The active chunk is never deleted.

Order of operations keeps a crash safe: new first offsets are made durable (checkpoint) before any
file is deleted, so a restart never sees a floor below deleted data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import files
from .chunk import Chunk
from .errors import StorageFull
from .model import RetentionReport
from .queue_index import QueueIndex

if TYPE_CHECKING:
    from .internals import StoreInternals

log = logging.getLogger("chunkmq.storage")


def _points_into(qi: QueueIndex, floor: int, lo: int, hi: int) -> bool:
    """Whether an entry of ``qi`` in [floor, next) points into positions [lo, hi)."""
    o = qi.first_at_or_after(floor, qi.next, lo)
    if o >= qi.next:
        return False
    p1 = qi.entry(o)[0]
    return bool(p1) and p1 - 1 < hi


def _lowest_readable(store: StoreInternals, qi: QueueIndex, upto: int) -> int:
    """Lowest offset o <= upto such that every record in [o, upto) still exists (no gaps)."""
    size = store.chunk_size
    o = upto
    while o > qi.first:
        p1 = qi.entry(o - 1)[0]
        if not p1 or ((p1 - 1) // size not in store.chunk_map and (p1 - 1) // size not in store.remote):
            break
        chunk_start = (p1 - 1) // size * size
        o = qi.first_at_or_after(qi.first, o - 1, chunk_start)  # first offset in that chunk
    return o


def retain(store: StoreInternals, floors: Mapping[int, int], free_bytes: int) -> RetentionReport:
    """``floors``: the queues whose floor changed since the last call; every other queue keeps the
    floor it was last given (its first offset if never). The work is proportional to what changed:
    the sealed chunks are checked only when a floor moved, a chunk was sealed, a queue was deleted
    or emptied, or ``free_bytes`` asks for space; the queues' first offsets only for those given a
    floor, or for all when chunks go."""
    report = RetentionReport()
    size = store.chunk_size
    doomed: list[Chunk] = []
    remote_doomed: list[int] = []  # evicted chunks (in the bucket only) no queue needs
    with store.writer_lock:
        store.check_open()
        queues = store.queue_indexes
        review: set[int] = set()
        for q, floor in floors.items():
            qi = queues.get(q)
            if qi is None or floor == qi.wanted:
                continue
            qi.wanted = floor
            qi.raise_floor(min(max(floor, qi.first), qi.next), size)  # live-byte accounting (the collector's)
            review.add(q)
        if review or store.floors_changed or free_bytes > 0:
            store.floors_changed = False
            live = [(qi, f) for qi in queues.values() if (f := _floor(qi)) < qi.next]
            files_ = store.chunk_files()
            for c in files_:
                if c is store.active_chunk or not c.sealed:
                    continue
                if store.pinned_from is not None and c.end > store.pinned_from:
                    continue  # holds delayed records not due yet (due_index.py)
                if not any(_points_into(qi, f, c.base, c.end) for qi, f in live):  # a merged file: all its numbers
                    doomed.append(c)
            for r in {r.number: r for r in store.remote.values()}.values():
                if not any(_points_into(qi, f, r.number * size, (r.last + 1) * size) for qi, f in live):
                    remote_doomed.append(r.number)
            if free_bytes > 0:  # the drop_oldest policy: free this much, needed or not, oldest first
                gone = {c.number for c in doomed}
                freed = sum(_allocated(c) for c in doomed)
                for c in files_:
                    if freed >= free_bytes or c is store.active_chunk:
                        break
                    if c.number not in gone:
                        doomed.append(c)
                        gone.add(c.number)
                        freed += _allocated(c)
        for c in doomed:
            store.forget(c)
        store.drop_remote(remote_doomed)
        if doomed or remote_doomed:
            review = set(queues)  # first offsets may have to follow deleted chunks, in any queue
        # new floors: up to the lowest readable offset, never above the requested floor except
        # where drop_oldest took data away
        for q in review:
            qi = queues[q]
            old = qi.first
            floor = _floor(qi)
            target = max(old, _lowest_readable(store, qi, floor)) if floor > old else old
            if not _exists(store, qi, target):  # drop_oldest took data at or above the floor
                target = _first_existing(store, qi, target)
            if target > old:
                freed = qi.bytes_between(old, target)
                qi.first = target
                qi.bytes -= freed
                qi.raise_floor(target, size)
                store.first_moved(q)
                report.first_offsets[q] = target
                if target > floor:
                    report.dropped[q] = (target - floor, qi.bytes_between(floor, target))
    try:
        store.flush()  # durable floors before any file goes away
    except StorageFull:
        # A full disk: the checkpoint has no room. The reserve file exists for this moment: give
        # its blocks back, write the checkpoint, and let the deletions below free the space.
        if not files.release_reserve(store.root):
            raise
        log.warning("the disk is full: released the reserve file to write the checkpoint before freeing space")
        store.flush()
    for c in doomed:
        freed = _allocated(c)
        c.close()
        try:
            c.path.unlink()
        except FileNotFoundError:
            continue
        report.chunks_deleted.append(c.number)
        report.bytes_freed += freed
    with store.writer_lock:
        # Index files go when a first offset moved past them, and their entries below it are punched
        # out one call later (QueueIndex.drop_files_below): the queues whose first moved since the
        # previous call, and those that moved the call before.
        due, store.punch_due = store.punch_due, set()
        for q in due:
            qi = store.queue_indexes.get(q)
            if qi is None:
                continue
            n, freed = qi.drop_files_below(qi.first)
            if n or freed:
                store.touch(q)  # index files changed (the disk measure)
            report.index_files_deleted += n
            report.bytes_freed += freed
        store.punch_due |= {q for q in due if q in store.queue_indexes and q not in store.punch_due
                            and store.queue_indexes[q].punch_pending()}
    if doomed:
        files.fsync_dir(files.log_dir(store.root))
    files.make_reserve(store.root)
    if report.chunks_deleted or report.index_files_deleted:
        log.info("retention: %s", report)
        log.debug("retention: %r", report)
    return report


def _floor(qi: QueueIndex) -> int:
    """The offset below which the queue needs nothing: the floor retain() was last given, within
    [first, next]; first if it was never given one."""
    return min(max(qi.wanted if qi.wanted is not None else qi.first, qi.first), qi.next)


def _exists(store: StoreInternals, qi: QueueIndex, offset: int) -> bool:
    if offset >= qi.next:
        return True
    p1 = qi.entry(offset)[0]
    n = (p1 - 1) // store.chunk_size
    return bool(p1) and (n in store.chunk_map or n in store.remote)


def _first_existing(store: StoreInternals, qi: QueueIndex, offset: int) -> int:
    """First offset >= ``offset`` whose record exists, jumping a missing chunk at a time."""
    size = store.chunk_size
    while offset < qi.next and not _exists(store, qi, offset):
        p1 = qi.entry(offset)[0]
        if not p1:
            offset += 1
            continue
        offset = qi.first_at_or_after(offset, qi.next, ((p1 - 1) // size + 1) * size)
    return offset


def _allocated(c: Chunk) -> int:
    try:
        return os.stat(c.path).st_blocks * 512
    except FileNotFoundError:
        return 0
