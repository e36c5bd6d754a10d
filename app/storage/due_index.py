"""Due index: one queue's delayed messages by due time, on disk, with a bounded window in memory.

A delayed message is stored in the log at once (durable like any other) but takes no queue offset
until it is due: the queue index holds only what groups may deliver, so a not-yet-due message never
sits below a group's ack floor, never holds the floor back, and cannot be passed by it. When it is
due, the broker appends a copy into the queue (a new offset after everything published before its
due time) and the record of the delayed message is no longer needed. Until then this index, and the
retention pin it gives (`pinned_position`), keep the delayed record.

Files, under one directory per queue (the broker's ``due/<queue id>``), integers little-endian::

    state                  magic b"CMQDUE01", u64 log_position P, u64 watermark W, u32 CRC-32 of the
                           20 bytes before it; written to a temp file, fsynced, renamed.
    <seq 10 digits>.due    a segment: magic b"CMQDUES1" (8 bytes), then fixed 16-byte entries:
                           u64 due_ms, u64 position + 1 (0 marks the end, as in the queue index).

Entries are appended in log order, so positions strictly increase across a queue's segments.
Invariants, kept on disk by `flush`: every delayed record of this queue at a log position below P
has its entry in the segments (fsynced); every entry with due_ms <= W has been delivered (its copy
was durable in the log before W was written). A segment whose entries are all <= W is deleted.

Recovery (`DueIndex.open`, given the recovered log end L): entries are read until the first one
that is zero, out of order or at a position >= min(P, L); the rest is cut. The caller replays the
log from `scan_from` = min(P, L) with `add` (records past the checkpoint, as the queue index does),
so no entry is lost to a torn write and none points at a record the log lost. A crash between a
delivery and the next `flush` delivers those messages again (at-least-once, like acks).

Memory: a heap holds every pending entry with due <= `window_end`, refilled from the segments
(one numpy pass, WINDOW entries taken) when it empties; nothing else is kept per message.
Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import functools
import heapq
import os
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported when a due index is first read: a start without delays never loads it
    import numpy as np

STATE_MAGIC = b"CMQDUE01"
SEGMENT_MAGIC = b"CMQDUES1"
STATE = struct.Struct("<8sQQI")
ENTRY = struct.Struct("<QQ")
HEADER = len(SEGMENT_MAGIC)
SEGMENT_ENTRIES = 1 << 20  # 16 MiB per segment file
WINDOW = 65_536  # pending entries taken into memory per refill


@functools.cache
def _entry_dtype() -> Any:
    """ENTRY as a numpy record: (due, pos1)."""
    import numpy as np

    return np.dtype([("due", "<u8"), ("pos1", "<u8")])
NO_END = (1 << 63) - 1
# An index with nothing new rewrites its checkpoint only once the log has moved this far past it:
# what a recovery replays stays bounded without an fsync per index for every publish elsewhere.
STALE_CHECKPOINT_BYTES = 64 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_name(seq: int) -> str:
    return f"{seq:010d}.due"


def write_state(directory: Path, log_position: int, watermark: int) -> None:
    head = STATE.pack(STATE_MAGIC, log_position, watermark, 0)[:-4]
    tmp = directory / "state.tmp"
    with open(tmp, "wb") as f:
        f.write(head + struct.pack("<I", zlib.crc32(head)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / "state")
    _fsync_dir(directory)


def read_state(directory: Path) -> tuple[int, int] | None:
    try:
        raw = (directory / "state").read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != STATE.size:
        return None
    magic, position, watermark, crc = STATE.unpack(raw)
    if magic != STATE_MAGIC or zlib.crc32(raw[:-4]) != crc:
        return None
    return position, watermark


class DueIndex:
    def __init__(self, directory: Path, log_position: int, watermark: int) -> None:
        self.directory = directory
        self.watermark = watermark  # every entry due at or before it is delivered
        self.window_end = watermark  # the heap holds every pending entry due in (watermark, window_end]
        self.pending = 0  # entries due after the watermark
        self.scan_from = log_position  # where the caller replays the log from (after open)
        self._checkpointed = (log_position, watermark)
        self._heap: list[tuple[int, int]] = []  # (due ms, position)
        self._segments: list[int] = []  # sequence numbers, oldest first
        self._entries = 0  # entries in the newest segment, written or buffered
        self._buffer = bytearray()  # entries not written to the newest segment yet
        self._last_position = -1
        self._pin: int | None = None
        self._dirty = False

    # ---------------------------------------------------------------- open, create

    @classmethod
    def create(cls, directory: Path, log_position: int) -> DueIndex:
        """A new, empty index whose first record can be at `log_position` or later (written durably
        before any entry, so a recovery never replays the log from its start)."""
        directory.mkdir(parents=True, exist_ok=True)
        write_state(directory, log_position, 0)
        _fsync_dir(directory.parent)
        return cls.open(directory, log_position)

    @classmethod
    def open(cls, directory: Path, log_end: int) -> DueIndex:
        """Open and recover (module docstring); the caller then replays the log from `scan_from`."""
        state = read_state(directory)
        position, watermark = state if state is not None else (0, 0)
        limit = min(position, log_end)
        index = cls(directory, limit, watermark)
        seqs = sorted(int(p.name[:-4]) for p in directory.glob("*.due") if p.name[:-4].isdigit())
        cut = False
        for seq in seqs:
            path = directory / _segment_name(seq)
            if cut:
                path.unlink()
                continue
            entries = _read_segment(path)
            keep = _valid_prefix(entries, index._last_position, limit)
            if keep < len(entries) or path.stat().st_size != HEADER + keep * ENTRY.size:
                with open(path, "r+b") as f:
                    f.truncate(HEADER + keep * ENTRY.size)
                    os.fsync(f.fileno())
                cut = keep < len(entries)
            if keep:
                index._last_position = int(entries["pos1"][keep - 1]) - 1
            index._segments.append(seq)
            index._entries = keep
        index._rescan()
        return index

    # ---------------------------------------------------------------- writing

    def add(self, due_ms: int, position: int) -> None:
        """One delayed record of this queue, at `position` (greater than every earlier one)."""
        if position <= self._last_position:
            raise ValueError(f"due index {self.directory}: position {position} after {self._last_position}")
        due_ms = max(due_ms, self.watermark + 1)  # never counted as delivered before it is
        if not self._segments or self._entries >= SEGMENT_ENTRIES:
            self._roll()
        self._buffer += ENTRY.pack(due_ms, position + 1)
        self._entries += 1
        self._last_position = position
        self.pending += 1
        self._dirty = True
        if self._pin is None:
            self._pin = position
        if due_ms <= self.window_end:
            heapq.heappush(self._heap, (due_ms, position))
            if len(self._heap) > 2 * WINDOW:
                self._shrink()

    def _roll(self) -> None:
        self._write()
        seq = self._segments[-1] + 1 if self._segments else 0
        path = self.directory / _segment_name(seq)
        with open(path, "wb") as f:
            f.write(SEGMENT_MAGIC)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.directory)
        self._segments.append(seq)
        self._entries = 0

    def _write(self) -> None:
        if self._buffer:
            with open(self.directory / _segment_name(self._segments[-1]), "ab") as f:
                f.write(self._buffer)
            self._buffer = bytearray()

    def flush(self, log_position: int, watermark: int | None = None) -> None:
        """Make the entries durable, then record that the log below `log_position` is indexed and
        that everything due at or before `watermark` (default: the current one) is delivered. The
        caller gives a watermark only once the deliveries up to it are durable in the log."""
        watermark = self.watermark if watermark is None else min(watermark, self.watermark)
        position, written = self._checkpointed
        if not self._dirty and watermark == written and log_position - position < STALE_CHECKPOINT_BYTES:
            return
        if self._dirty and self._segments:
            self._write()
            fd = os.open(self.directory / _segment_name(self._segments[-1]), os.O_WRONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False
        write_state(self.directory, log_position, watermark)
        self._checkpointed = (log_position, watermark)
        self._drop_delivered_segments(watermark)

    # ---------------------------------------------------------------- reading

    def next_due(self) -> int | None:
        """Due time (epoch ms) of the nearest pending entry, or None."""
        if not self._heap and self.pending:
            self._refill()
        return self._heap[0][0] if self._heap else None

    def take_due(self, now_ms: int, limit: int = 10_000) -> list[tuple[int, int]]:
        """Pop up to `limit` entries due at or before `now_ms`, nearest first: (due ms, position).
        The watermark moves up to what they cover; the caller delivers them."""
        out: list[tuple[int, int]] = []
        heap = self._heap
        while len(out) < limit:
            if not heap:
                if not self.pending or self.window_end >= now_ms:
                    break
                self.watermark = max(self.watermark, self.window_end)  # all of the window is popped
                self._refill()
                if not heap:
                    break
            if heap[0][0] > now_ms:
                break
            out.append(heapq.heappop(heap))
            self.pending -= 1
        if out:
            self._dirty = True
        # everything due before the heap's nearest (or the window's end) is popped
        mark = heap[0][0] - 1 if heap else self.window_end
        self.watermark = max(self.watermark, min(mark, now_ms))
        if not self.pending:
            self._pin = None
        return out

    def put_back(self, entries: list[tuple[int, int]]) -> None:
        """Entries `take_due` gave that could not be delivered (the log refused the copies): pending
        again, and the watermark below them, so that no checkpoint counts them as delivered."""
        if not entries:
            return
        for entry in entries:
            heapq.heappush(self._heap, entry)
        self.pending += len(entries)
        self.watermark = min(self.watermark, min(due for due, _ in entries) - 1)  # (all are <= window_end)
        lowest = min(position for _, position in entries)
        self._pin = lowest if self._pin is None else min(self._pin, lowest)
        self._dirty = True

    @property
    def checkpointed_watermark(self) -> int:
        return self._checkpointed[1]

    def peek(self, count: int) -> list[tuple[int, int]]:
        """The nearest `count` pending entries (due ms, position), for a browser."""
        self.next_due()
        return heapq.nsmallest(count, self._heap)

    def pinned_position(self) -> int | None:
        """A position at or below every pending delayed record: retention keeps the log from it."""
        return self._pin if self.pending else None

    # ---------------------------------------------------------------- window

    def _live_entries(self) -> np.ndarray:
        """Every entry due after the watermark, in log order: one pass over the files, each read
        whole and filtered before the next (a segment at a time in memory, 16 MiB at most)."""
        import numpy as np

        self._write()
        parts = []
        for s in self._segments:
            entries = _read_segment(self.directory / _segment_name(s))
            parts.append(entries[entries["due"] > self.watermark])
        return np.concatenate(parts) if parts else np.empty(0, _entry_dtype())

    def _rescan(self) -> None:
        """The pending count, the pin and a new window, from the files."""
        live = self._live_entries()
        self.pending = len(live)
        self._pin = int(live["pos1"][0]) - 1 if len(live) else None
        self._heap = []
        self.window_end = self.watermark
        self._fill(live)

    def _refill(self) -> None:
        live = self._live_entries()
        self._pin = int(live["pos1"][0]) - 1 if len(live) else None
        self._fill(live[live["due"] > self.window_end])

    def _fill(self, candidates: np.ndarray) -> None:
        import numpy as np

        if not len(candidates):
            self.window_end = NO_END  # nothing pending beyond: every new entry enters the heap
            return
        dues = candidates["due"]
        if len(dues) > WINDOW:
            end = int(np.partition(dues, WINDOW - 1)[WINDOW - 1])
            candidates = candidates[dues <= end]
        else:
            end = int(dues.max())
        self._heap.extend(zip(candidates["due"].tolist(), (candidates["pos1"] - 1).tolist(), strict=True))
        heapq.heapify(self._heap)
        self.window_end = end

    def _shrink(self) -> None:
        """Too many new entries fell inside the window: keep its nearest WINDOW, lower its end."""
        self._heap.sort()
        end = self._heap[WINDOW - 1][0]
        self._heap = [e for e in self._heap if e[0] <= end]
        self.window_end = end

    def _drop_delivered_segments(self, watermark: int) -> None:
        for seq in self._segments[:-1]:
            path = self.directory / _segment_name(seq)
            entries = _read_segment(path)
            if len(entries) and int(entries["due"].max()) > watermark:
                break
            path.unlink()
            self._segments.remove(seq)

    def remove(self) -> None:
        """Delete the index (its queue is deleted)."""
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()


def _read_segment(path: Path) -> np.ndarray:
    import numpy as np

    raw = path.read_bytes()
    if raw[:HEADER] != SEGMENT_MAGIC:
        return np.empty(0, _entry_dtype())
    body = raw[HEADER:]
    return np.frombuffer(body[: len(body) // ENTRY.size * ENTRY.size], _entry_dtype())


def _valid_prefix(entries: np.ndarray, last_position: int, limit: int) -> int:
    """How many entries from the start are valid: non-zero, positions increasing, below `limit`."""
    import numpy as np

    if not len(entries):
        return 0
    pos = entries["pos1"].astype(np.int64) - 1
    ok = (entries["due"] > 0) & (entries["pos1"] > 0) & (pos < limit)
    previous = np.concatenate(([last_position], pos[:-1]))
    ok &= pos > previous
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(entries)
