"""Public value types of the storage engine (options, messages, reports)."""

from __future__ import annotations

import itertools
import mmap
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

# What the record readers take: a chunk file's mmap, or bytes cut from one.
ReadBuffer = bytes | bytearray | memoryview | mmap.mmap


class FsyncMode(StrEnum):
    ALWAYS = "always"  # durable(pos) resolves after an fsync (group commit)
    INTERVAL = "interval"  # the flusher fsyncs every fsync_interval_ms when dirty
    NEVER = "never"  # the OS decides (fsync only on flush/close/checkpoint)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    chunk_size: int = 256 * 1024 * 1024  # data bytes per log chunk (tests use e.g. 64 KiB)
    index_chunk_entries: int = 1_000_000  # entries per index chunk file
    fsync: FsyncMode = FsyncMode.INTERVAL
    fsync_interval_ms: int = 100
    max_message_bytes: int = 4 * 1024 * 1024  # limit on len(NewMessage.data)
    max_batch_bytes: int = 64 * 1024 * 1024  # limit on the encoded batch (it must also fit one chunk)
    checkpoint_interval_ms: int = 1000  # how often indexes are flushed and the recovery point written
    tail_cache_bytes: int = 8 * 1024 * 1024  # recent batches kept in memory for tail readers
    verify_reads: bool = True  # check each record's CRC on read()
    # The collector (gc.py) rewrites sealed chunks whose live share (live bytes / chunk_size) is below
    # this, after each retain(); 0 = no collector thread (Store.collect() still works on demand).
    gc_threshold: float = 0.0
    gc_duty: float = 0.1  # share of wall time the collector thread may work (it sleeps the rest)


@dataclass(slots=True)
class NewMessage:
    data: bytes  # opaque payload (the broker stores routing key, exchange, headers, body here)
    queues: Sequence[int]  # queue ids this message is placed in
    tag: bytes = b""  # hashed into each index entry (tag_hash)
    idempotency_key: bytes = b""
    flags: int = 0  # caller-owned bits 0..7; storage owns bit 15 (END_OF_BATCH)


@dataclass(slots=True)
class MessageColumns:
    """A batch to append, field by field: what the publish path hands the store, so no object is
    built per message. ``queues`` holds each message's queue ids (often one shared tuple, repeated);
    ``tags``, ``idempotency_keys`` and ``flags`` are None when no message has one."""

    data: list[bytes]
    queues: list[Sequence[int]]
    tags: list[bytes] | None = None
    idempotency_keys: list[bytes] | None = None
    flags: list[int] | None = None

    def __len__(self) -> int:
        return len(self.data)

    @classmethod
    def of(cls, messages: Sequence[NewMessage]) -> MessageColumns:
        tags = [m.tag for m in messages]
        keys = [m.idempotency_key for m in messages]
        flags = [m.flags for m in messages]
        return cls([m.data for m in messages], [m.queues for m in messages], tags if any(tags) else None,
                   keys if any(keys) else None, flags if any(flags) else None)


@dataclass(slots=True)
class Appended:
    position: int  # global position of the record
    timestamp: int  # UTC epoch ms assigned by the store (non-decreasing)
    offsets: list[tuple[int, int]]  # (queue id, queue offset) per placement


class QueueCap(NamedTuple):
    """What a queue may hold after an append (None: no limit). An append that would take a queue past
    its cap is refused whole (QueueCapReached), checked with the batch's exact sizes on disk."""

    max_messages: int | None
    max_bytes: int | None


class BatchSpace(NamedTuple):
    """What an append is about to take on disk, shown to its `admit` callback before anything is
    written: its records' bytes, whether they start a new chunk file, and its index entries (one per
    placement) over how many queues."""

    record_bytes: int
    new_chunk: bool
    placements: int
    queues: int


@dataclass(slots=True)
class AppendedBatch:
    """What one append stored, column by column: the publish path reads the columns, so no object is
    built per record; indexing or iterating gives Appended views for everyone else."""

    timestamp: int  # one clock reading per batch
    positions: list[int]
    queues: list[int]  # every placement's queue id and offset, in message order
    offsets: list[int]
    counts: list[int] | None = None  # placements per message; None: exactly one each

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> Appended:
        return Appended(self.positions[i], self.timestamp, self.placements[i])

    def __iter__(self) -> Iterator[Appended]:
        return (self[i] for i in range(len(self.positions)))

    @property
    def placements(self) -> list[list[tuple[int, int]]]:
        """Per message, its (queue id, queue offset) pairs."""
        pairs = list(zip(self.queues, self.offsets, strict=True))
        if self.counts is None:
            return [[p] for p in pairs]
        ends = list(itertools.accumulate(self.counts, initial=0))
        return [pairs[a:b] for a, b in itertools.pairwise(ends)]


# One message read from a queue: (offset, position, timestamp, flags, tag, data), flags holding the
# caller's bits only. A plain tuple, as sqlite3 rows are: a read builds one per record, and a tuple
# costs a third of a dataclass or named tuple there (docs/storage.md, "Reads"). Unpack it by name:
#     for offset, position, timestamp, flags, tag, data in store.read(...)
StoredMessage = tuple[int, int, int, int, bytes, bytes]


@dataclass(slots=True)
class Record:
    position: int
    timestamp: int
    flags: int  # caller bits only
    placements: list[tuple[int, int]]
    idempotency_key: bytes
    tag: bytes
    data: bytes


@dataclass(slots=True)
class IndexEntry:
    position: int
    length: int  # whole record on disk, framing included
    tag_hash: int


class ChunkState(StrEnum):
    """A chunk's lifecycle: ACTIVE -> SEALED, never back (Chunk.sealed only ever becomes true)."""

    ACTIVE = "active"  # the one chunk appends go to
    SEALED = "sealed"  # full, or closed by a restart or a rewrite: its footer written, read only


@dataclass(slots=True)
class ChunkInfo:
    number: int
    state: ChunkState
    path: Path
    data_bytes: int
    records: int
    reads_cache: int
    reads_disk: int
    writes: int
    created_ms: int
    first_timestamp: int  # 0 while empty
    live_bytes: int = 0  # bytes of records some queue still needs (at or above its floor)
    file_bytes: int = 0  # the file's size on disk (allocated blocks)
    rewritten: bool = False  # written by the collector (gc.py)
    last: int = 0  # highest chunk number whose records the file holds (= number unless merged)


@dataclass(slots=True)
class GcReport:
    """What one Store.collect() pass did."""

    rewrites: int = 0  # rewritten files written
    chunks_replaced: list[int] = field(default_factory=list)  # chunk files replaced (merged ones included)
    bytes_copied: int = 0  # live record bytes copied
    bytes_freed: int = 0  # allocated bytes given back to the file system
    seconds: float = 0.0

    def __str__(self) -> str:
        """The log's sentence: what the pass rewrote and what it freed (the repr has the chunk numbers)."""
        return (f"rewrote {len(self.chunks_replaced)} chunk files into {self.rewrites}, copying "
                f"{self.bytes_copied} bytes of live records and freeing {self.bytes_freed} bytes, "
                f"in {self.seconds * 1000:.1f} ms")


@dataclass(slots=True)
class RetentionReport:
    chunks_deleted: list[int] = field(default_factory=list)
    index_files_deleted: int = 0
    bytes_freed: int = 0
    first_offsets: dict[int, int] = field(default_factory=dict)  # queues whose floor moved: new first offset
    dropped: dict[int, tuple[int, int]] = field(default_factory=dict)  # by free_bytes (drop_oldest): (messages, bytes)

    def __str__(self) -> str:
        """The log's sentence: what went and what it freed (the repr has the chunks and the queues)."""
        done = [f"deleted {len(self.chunks_deleted)} chunk files and {self.index_files_deleted} index files, "
                f"freeing {self.bytes_freed} bytes"]
        if self.first_offsets:
            done.append(f"the first offset of {len(self.first_offsets)} queues moved")
        if self.dropped:
            messages = sum(m for m, _ in self.dropped.values())
            size = sum(b for _, b in self.dropped.values())
            done.append(f"dropped {messages} messages ({size} bytes) of {len(self.dropped)} queues to free disk space")
        return "; ".join(done)


@dataclass(slots=True)
class RecoveryReport:
    checkpoint_found: bool = False
    scanned_from: int = 0  # global position where the log scan started
    end_position: int = 0
    bytes_truncated: int = 0  # torn tail + incomplete trailing batch cut from the last chunk
    batches_dropped: int = 0  # complete-looking records dropped because their batch had no end mark
    records_replayed: int = 0  # records whose placements were re-written into the indexes
    index_entries_zeroed: int = 0  # stale entries beyond a queue's recovered end
    queues_rebuilt: list[int] = field(default_factory=list)  # damaged indexes rebuilt from the log
    quarantined: list[int] = field(default_factory=list)  # chunk numbers renamed to .bad
    resealed: list[int] = field(default_factory=list)  # sealed chunks whose footer had to be rewritten
    replaced_deleted: list[int] = field(default_factory=list)  # left by a collector crash (gc.py step 4)
    seconds: float = 0.0

    def __str__(self) -> str:
        """The log's sentence: what recovery did, in words and numbers (the repr has every field)."""
        start = "after the checkpoint" if self.checkpoint_found else "with no checkpoint"
        done = [f"recovered {self.records_replayed} records {start} (log scanned from position {self.scanned_from} "
                f"to {self.end_position}) in {self.seconds * 1000:.1f} ms"]
        done.append(f"truncated {self.bytes_truncated} bytes" if self.bytes_truncated else "nothing truncated")
        repairs = [(self.batches_dropped, "incomplete batches dropped"),
                   (self.index_entries_zeroed, "stale index entries zeroed"),
                   (len(self.queues_rebuilt), "queue indexes rebuilt"),
                   (len(self.quarantined), "chunks quarantined"),
                   (len(self.resealed), "chunks resealed"),
                   (len(self.replaced_deleted), "replaced chunks deleted")]
        done += [f"{count} {what}" for count, what in repairs if count]
        return "; ".join(done)


def tag_hash(tag: bytes) -> int:
    """0 for no tag; otherwise CRC32 of the tag, never 0 (0 is mapped to 1)."""
    if not tag:
        return 0
    return zlib.crc32(tag) or 1


@dataclass(slots=True)
class ColumnPage:
    """Messages of a queue read column by column (Store.read_columns), for readers that build
    columnar pages (Arrow) without a Python object per message: numpy arrays of one row per message,
    and the tags and data as (start, length) slices of one buffer."""

    offsets: Any  # numpy int64 arrays, one row per message
    positions: Any
    timestamps: Any  # UTC epoch ms
    flags: Any  # the caller's bits
    tag_start: Any
    tag_len: Any
    data_start: Any
    data_len: Any
    buf: bytes
    next_offset: int  # the offset after the last entry read

    def __len__(self) -> int:
        return len(self.offsets)
