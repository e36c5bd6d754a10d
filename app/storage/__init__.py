"""chunkmq storage engine: a message log in chunk files with per-queue offset indexes.

Plain synchronous Python, file system only. See docs/storage.md and the docstrings of the format
modules (record.py, chunk.py, queue_index.py, checkpoint.py) for the on-disk formats.
"""

from .due_index import DueIndex
from .errors import (
    BatchTooLarge,
    CorruptChunk,
    MessageTooLarge,
    QueueCapReached,
    StorageError,
    StorageFull,
    StoreClosed,
    TierError,
    UnknownQueue,
)
from .model import (
    Appended,
    AppendedBatch,
    BatchSpace,
    ChunkInfo,
    ChunkState,
    FsyncMode,
    GcReport,
    IndexEntry,
    MessageColumns,
    NewMessage,
    QueueCap,
    Record,
    RecoveryReport,
    RetentionReport,
    StoredMessage,
    StoreOptions,
    tag_hash,
)
from .record import record_size
from .store import Store

__all__ = [
    "Appended",
    "AppendedBatch",
    "BatchSpace",
    "BatchTooLarge",
    "ChunkInfo",
    "ChunkState",
    "CorruptChunk",
    "DueIndex",
    "FsyncMode",
    "GcReport",
    "IndexEntry",
    "MessageColumns",
    "MessageTooLarge",
    "NewMessage",
    "QueueCap",
    "QueueCapReached",
    "Record",
    "RecoveryReport",
    "RetentionReport",
    "StorageError",
    "StorageFull",
    "Store",
    "StoreClosed",
    "StoreOptions",
    "StoredMessage",
    "TierError",
    "UnknownQueue",
    "record_size",
    "tag_hash",
]
