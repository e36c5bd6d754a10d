"""Exceptions raised by the storage engine.

::

    StorageError                 any storage failure
    ├── MessageTooLarge          one message's data exceeds max_message_bytes
    ├── BatchTooLarge            the encoded batch exceeds max_batch_bytes or one chunk
    ├── StorageFull              ENOSPC / EFBIG while writing; the store stays consistent
    ├── CorruptChunk             a chunk file fails validation (header, footer or a record's CRC)
    ├── StoreClosed              the store was closed
    ├── QueueCapReached          an append would take a queue past its QueueCap
    └── UnknownQueue (KeyError)  a queue id that was never created (or was deleted)

The storage engine knows nothing of HTTP: the API's code and status of each class is in the one
error map, app/api/errors.py ERROR_MAP.
"""

from __future__ import annotations

import errno


class StorageError(Exception):
    """Raised when the storage engine cannot do what was asked."""


class MessageTooLarge(StorageError):
    """Raised when a message's data is larger than ``max_message_bytes`` (nothing is written)."""


class BatchTooLarge(StorageError):
    """Raised when an encoded batch exceeds ``max_batch_bytes`` or one chunk (nothing is written)."""


class StorageFull(StorageError):
    """Raised when the disk is full (ENOSPC) or the file size limit is hit (EFBIG).

    Nothing of the failed batch is visible, now or after a restart.
    """


class TierError(StorageError):
    """Raised when the tier's bucket refuses or fails a request; the message names the URL and what
    failed (tier.py)."""


class CorruptChunk(StorageError):
    """Raised when a chunk file (or one record in it) fails validation."""

    def __init__(self, message: str, *, chunk: int | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.chunk = chunk
        self.position = position


class StoreClosed(StorageError):
    """Raised when the store is used after close()."""


class QueueCapReached(StorageError):
    """Raised when an append would take a queue past its cap (nothing is written)."""

    def __init__(self, queue_id: int, held: int, limit: int, unit: str) -> None:
        super().__init__(f"queue {queue_id} would hold more than its {limit} {unit} (it holds {held})")
        self.queue_id, self.held, self.limit, self.unit = queue_id, held, limit, unit


class UnknownQueue(StorageError, KeyError):
    """Raised when a queue id was never created or has been deleted."""

    def __init__(self, queue_id: int) -> None:
        super().__init__(f"unknown queue id {queue_id}")
        self.queue_id = queue_id

    def __str__(self) -> str:  # KeyError would repr() the message
        return f"unknown queue id {self.queue_id}"


def os_failure(exc: OSError, what: str) -> StorageError:
    """An OSError of a file operation as the storage error callers see (StorageFull when out of space)."""
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return StorageFull(f"{what}: {exc.strerror}")
    return StorageError(f"{what}: {exc}")
