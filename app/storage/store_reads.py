"""The read path of a Store (the Reads part): by offset, by tag, as columns, by position, scans."""

from __future__ import annotations

import itertools
import logging
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from operator import itemgetter

from .chunk import HEADER_SIZE as CHUNK_HEADER
from .chunk import Chunk
from .errors import CorruptChunk
from .model import ColumnPage, IndexEntry, Record, StoredMessage
from .queue_index import ENTRY, ENTRY_DTYPE, QueueIndex
from .record import VERSION, decode, fields_at, iter_records, read_run, record_length, timestamp_at
from .record_columns import columns as record_columns
from .store_tiering import Tiering

log = logging.getLogger("chunkmq.storage")


_iter_entries = ENTRY.iter_unpack
_tail_start_key = itemgetter(0)


class Reads(Tiering):
    """The read path: a queue's index entries give positions; the records are read from the tail
    cache (the batches just written, no CRC check), a chunk's mmap, or a chunk fetched back from
    the tier.

    Thread-safe without the writer lock: readers run concurrently with the writer and with
    retention, which may close a chunk under them (a ValueError from its mmap ends the read with
    what was read so far).
    """

    def _source(self, pos: int) -> tuple[bytes | object, int, Chunk | None, bool]:
        """Where the record at ``pos`` can be read: (buffer, offset in it, chunk, from cache)."""
        tail = self._tail
        if tail and pos >= tail[0][0]:
            i = bisect_right(tail, pos, key=_tail_start_key) - 1
            start, buf = tail[i]
            if pos - start < len(buf):
                return buf, pos - start, self._chunks.get(pos // self._size), True
        c = self._chunks.get(pos // self._size)
        if c is None:
            c = self._fetched(pos // self._size)
            if c is None:
                return None, 0, None, False
        if c.moved_positions is None:
            return c.mm, pos - c.base + CHUNK_HEADER, c, False
        local = c.local_of(pos)  # a rewritten chunk: its moved table says where the record is now
        if local < 0:
            return None, 0, None, False
        return c.mm, local + CHUNK_HEADER, c, False

    def read(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int | None = None,
        tag_hashes: frozenset[int] | None = None,
    ) -> list[StoredMessage]:
        """Messages at offsets >= max(offset, first_offset), in order, up to max_count (and max_bytes
        of data, at least one). With tag_hashes, other tags are skipped (see read_matching)."""
        return self._read(queue_id, offset, max_count, max_bytes, tag_hashes, 100_000)[0]

    def read_matching(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_hashes: frozenset[int],
        *,
        max_bytes: int | None = None,
        max_scan: int = 100_000,
    ) -> tuple[list[StoredMessage], int]:
        """Messages whose tag hash is in ``tag_hashes``, and the offset after the last entry scanned."""
        return self._read(queue_id, offset, max_count, max_bytes, tag_hashes, max_scan)

    def _read(
        self,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int | None,
        tag_hashes: frozenset[int] | None,
        max_scan: int,
    ) -> tuple[list[StoredMessage], int]:
        self.check_open()
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, start + (max_scan if tag_hashes is not None else max_count))
        out: list[StoredMessage] = []
        if start >= end or max_count <= 0:
            return out, max(start, min(offset, qi.next))
        if tag_hashes is None and max_bytes is None:
            out = self._read_run(qi, start, end)
            while len(out) < max_count and end < qi.next:  # entries lost to a quarantine were skipped
                more = min(qi.next, end + max_count - len(out))
                out += self._read_run(qi, end, more)
                end = more
            return out, end
        return self._read_general(qi, start, end, max_count, max_bytes, tag_hashes)

    def _locate(self, pos: int) -> tuple[object, int, int, Chunk | None, bool]:
        """(buffer, delta, hi, chunk, cached): the record at global ``pos`` sits at buffer[pos + delta],
        and so does every position in [pos, hi)."""
        src, off, c, cached = self._source(pos)
        if src is None:
            return None, 0, 0, None, False
        if cached:
            return src, off - pos, pos + len(src) - off, c, True  # type: ignore[arg-type]
        if c is not None and c.moved_positions is not None:
            return src, off - pos, pos + 1, c, False  # moved records: one position at a time
        return src, off - pos, pos - pos % self._size + self._size, c, False

    def _read_run(self, qi: QueueIndex, start: int, end: int) -> list[StoredMessage]:
        """The hot read path: every entry of [start, end), no filter, no byte budget. Each run of
        entries one source serves (a chunk's mmap, or a cached batch) is decoded by record.read_run."""
        out: list[StoredMessage] = []
        verify = self.options.verify_reads
        entries = enumerate(_iter_entries(qi.raw(start, end - start)), start)
        pending = next(entries, None)
        cur: Chunk | None = None
        cached = False
        mark = 0
        try:
            while pending is not None:
                p1 = pending[1][0]
                if cur is not None:
                    self._count(cur, cached, len(out) - mark)
                    cur = None
                mark = len(out)
                if not p1:  # a hole (data lost to quarantine)
                    pending = next(entries, None)
                    continue
                src, delta, hi, cur, cached = self._locate(p1 - 1)
                if src is None:  # chunk deleted or quarantined: the entry is gone
                    pending = next(entries, None)
                    continue
                version = cur.version if cur is not None and not cached else VERSION
                # the tail cache holds the bytes we wrote: no CRC check for them
                pending = read_run(src, delta - 1, p1 - 1, hi, itertools.chain((pending,), entries), out,
                                   verify and not cached, version, self._size)
        except ValueError:
            pass  # a chunk closed under us by retention: what was read so far stands
        if cur is not None:
            self._count(cur, cached, len(out) - mark)
        return out

    def read_columns(self, queue_id: int, offset: int, max_count: int) -> ColumnPage:
        """Messages at offsets >= max(offset, first_offset), up to max_count, as columns (ColumnPage):
        what read() returns, without a Python object per message. The records are copied out of
        the log one span per chunk and parsed with numpy (record_columns.columns); records of format-1 chunks
        are decoded one by one and appended to the buffer."""
        import numpy as np

        self.check_open()
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, start + max(max_count, 0))
        entries = np.frombuffer(qi.raw(start, end - start) if start < end else b"", ENTRY_DTYPE)
        offsets = np.flatnonzero(entries["p1"]) + start
        entries = entries[entries["p1"] != 0]  # holes: data lost to a quarantine
        positions = entries["p1"].astype(np.int64) - 1
        lengths = entries["len"].astype(np.int64)
        parts: list[bytes] = []
        used = 0
        starts = np.full(len(positions), -1, np.int64)  # -1: gone (chunk deleted), dropped below
        verify = np.zeros(len(positions), bool)  # the tail cache holds the bytes we wrote: no CRC check
        old: list[tuple[int, tuple[int, int, bytes, bytes]]] = []  # rows of format-1 chunks
        i = 0
        try:
            while i < len(positions):
                pos = int(positions[i])
                src, delta, hi, c, cached = self._locate(pos)
                j = int(np.searchsorted(positions, hi, "left")) if src is not None else \
                    int(np.searchsorted(positions, pos - pos % self._size + self._size, "left"))
                j = max(j, i + 1)
                if src is None:
                    i = j
                    continue
                if c is not None and not cached and c.version != VERSION:
                    for k in range(i, j):
                        got = fields_at(src, int(positions[k]) + delta, int(lengths[k]),  # type: ignore[arg-type]
                                        self.options.verify_reads, c.version)
                        if got is None:
                            raise CorruptChunk(f"record at {positions[k]} fails validation", chunk=c.number,
                                               position=int(positions[k]))
                        old.append((k, got))
                    i = j
                    continue
                lo = pos + delta
                top = int(positions[j - 1] + lengths[j - 1]) + delta
                need = int(lengths[i:j].sum())
                if top - lo <= 4 * need + (1 << 20):  # one copy of the span, other queues' records and all
                    parts.append(src[lo:top])  # type: ignore[index]
                    starts[i:j] = positions[i:j] - pos + used
                    used += top - lo
                else:  # a sparse queue: each record on its own
                    ends = np.cumsum(lengths[i:j])
                    rows = zip(positions[i:j].tolist(), lengths[i:j].tolist(), strict=True)
                    parts.append(b"".join([src[a + delta : a + delta + m] for a, m in rows]))  # type: ignore[index]
                    starts[i:j] = ends - lengths[i:j] + used
                    used += need
                verify[i:j] = self.options.verify_reads and not cached
                if c is not None:
                    self._count(c, cached, j - i)
                i = j
        except ValueError:  # a chunk closed under us by retention: what was read so far stands
            starts[i:] = -1
            if i < len(offsets):
                end = int(offsets[i])
        buf = b"".join(parts)
        ts, flags, tag_start, tag_len, data_start, data_len, ok = record_columns(
            buf, starts, lengths, verify)
        ok &= starts >= 0
        for k, (t, f, tag, data) in old:  # format-1 rows: their fields appended to the buffer
            ts[k], flags[k], tag_start[k], tag_len[k] = t, f, used, len(tag)
            data_start[k], data_len[k] = used + len(tag), len(data)
            parts.append(tag + data)
            used += len(tag) + len(data)
            ok[k] = True
        if old:
            buf = b"".join(parts)
        bad = np.flatnonzero(~ok & (starts >= 0))
        if len(bad):
            pos = int(positions[bad[0]])
            raise CorruptChunk(f"record at {pos} fails validation", chunk=pos // self._size, position=pos)
        keep = ok
        next_offset = end if start < end else max(start, min(offset, qi.next))
        return ColumnPage(offsets[keep], positions[keep], ts[keep], flags[keep], tag_start[keep], tag_len[keep],
                          data_start[keep], data_len[keep], buf, next_offset)

    @staticmethod
    def _count(c: Chunk, cached: bool, n: int) -> None:
        if cached:
            c.reads_cache += n
        else:
            c.reads_disk += n

    def _read_general(
        self,
        qi: QueueIndex,
        start: int,
        end: int,
        max_count: int,
        max_bytes: int | None,
        tag_hashes: frozenset[int] | None,
    ) -> tuple[list[StoredMessage], int]:
        verify = self.options.verify_reads
        used = 0
        out: list[StoredMessage] = []
        o = start - 1
        try:
            for p1, length, th in _iter_entries(qi.raw(start, end - start)):
                o += 1
                if not p1 or (tag_hashes is not None and th not in tag_hashes):
                    continue
                pos = p1 - 1
                src, delta, _, c, cached = self._locate(pos)
                if src is None:
                    continue
                got = fields_at(src, pos + delta, length, verify and not cached,  # type: ignore[arg-type]
                                c.version if c is not None and not cached else VERSION)
                if got is None:
                    raise CorruptChunk(f"record at {pos} fails validation", chunk=pos // self._size, position=pos)
                ts, flags, tag, data = got
                if max_bytes is not None and out and used + len(data) > max_bytes:
                    o -= 1
                    break
                used += len(data)
                out.append((o, pos, ts, flags, tag, data))
                if c is not None:
                    self._count(c, cached, 1)
                if len(out) >= max_count:
                    break
        except ValueError:
            pass
        return out, o + 1

    def index_entries(self, queue_id: int, offset: int, count: int) -> list[IndexEntry]:
        qi = self._queue(queue_id)
        start = max(offset, qi.first)
        end = min(qi.next, offset + count)
        if start >= end:
            return []
        return [IndexEntry(p - 1, n, th) for p, n, th in _iter_entries(qi.raw(start, end - start))]

    def read_at(self, position: int) -> Record:
        """The record at a global position; KeyError if deleted or not a record start."""
        self.check_open()
        c = self._chunks.get(position // self._size) if position >= 0 else None
        if c is None and position >= 0:
            c = self._fetched(position // self._size)
        if c is None:
            raise KeyError(position)
        local = c.local_of(position)
        if local < 0:
            raise KeyError(position)
        try:
            n = record_length(c.mm, CHUNK_HEADER + local, CHUNK_HEADER + c.data_bytes, c.version)
            if not n:
                raise KeyError(position)
            c.reads_disk += 1
            return decode(c.mm, CHUNK_HEADER + local, position, c.version)
        except ValueError as exc:  # closed by retention
            raise KeyError(position) from exc

    def _timestamp(self, qi: QueueIndex, offset: int) -> int | None:
        p1 = qi.entry(offset)[0]
        if not p1:
            return None
        c = self._chunks.get((p1 - 1) // self._size) or self._fetched((p1 - 1) // self._size)
        if c is None:
            return None
        local = c.local_of(p1 - 1)
        if local < 0:
            return None
        try:
            return timestamp_at(c.mm, CHUNK_HEADER + local, c.version)
        except ValueError:
            return None

    def timestamp_of(self, queue_id: int, offset: int) -> int | None:
        qi = self._queue(queue_id)
        if not qi.first <= offset < qi.next:
            return None
        return self._timestamp(qi, offset)

    def offset_for_timestamp(self, queue_id: int, timestamp_ms: int) -> int:
        """First offset in [first, next] whose timestamp >= timestamp_ms (binary search)."""
        qi = self._queue(queue_id)
        lo, hi = qi.first, qi.next
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self._timestamp(qi, mid)
            if ts is None or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def scan(self, from_position: int = 0) -> Iterator[Record]:
        """Every valid record at or after ``from_position`` (a record start), in log order."""
        self.check_open()
        end = self._end
        for c in self.chunk_files():
            if c.end <= from_position:
                continue
            if c.moved_positions is None:
                p = CHUNK_HEADER + max(0, from_position - c.base)
            else:
                moved = c.moved_offsets
                assert moved is not None  # set together with moved_positions
                i = bisect_left(c.moved_positions, from_position)
                p = CHUNK_HEADER + (moved[i] if i < len(moved) else c.data_bytes)
            limit = CHUNK_HEADER + min(c.data_bytes, end - c.base)
            try:
                for off, n, *_ in iter_records(c.mm, p, limit, c.version):
                    yield decode(c.mm, off, c.position_of(off - CHUNK_HEADER), c.version)
                    p = off + n
                if p < limit:
                    log.error("chunk %d: invalid record at data offset %d; rest of the chunk skipped",
                              c.number, p - CHUNK_HEADER)
            except ValueError:
                continue  # deleted by retention while scanning

    def scan_since(self, timestamp_ms: int) -> Iterator[Record]:
        """Records with timestamp >= timestamp_ms, starting at the first chunk that can hold one."""
        start = None
        for c in self.chunk_files():
            if c.records and c.last_ts >= timestamp_ms:
                start = c.base
                break
        if start is None:
            return
        for r in self.scan(start):
            if r.timestamp >= timestamp_ms:
                yield r
