"""The storage engine's exceptions (app/storage/errors.py): the tree callers catch, and OS errors of
file operations translated into it (a full disk or quota is StorageFull)."""

from __future__ import annotations

import errno

import pytest

from chunkmq.storage import errors


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT])
def test_out_of_space_is_storage_full(code: int) -> None:
    error = errors.os_failure(OSError(code, "No space left on device"), "writing chunk 3")
    assert type(error) is errors.StorageFull and str(error) == "writing chunk 3: No space left on device"


def test_any_other_os_error_is_a_storage_error_naming_the_operation() -> None:
    error = errors.os_failure(OSError(errno.EIO, "Input/output error"), "syncing index 7")
    assert type(error) is errors.StorageError and str(error).startswith("syncing index 7: ")


def test_the_tree_and_its_context_fields() -> None:
    for cls in (errors.MessageTooLarge, errors.BatchTooLarge, errors.StorageFull, errors.CorruptChunk,
                errors.StoreClosed, errors.QueueCapReached, errors.UnknownQueue):
        assert issubclass(cls, errors.StorageError)
    corrupt = errors.CorruptChunk("bad CRC", chunk=3, position=4096)
    assert (corrupt.chunk, corrupt.position) == (3, 4096)
    cap = errors.QueueCapReached(2, 10, 10, "messages")
    assert (cap.queue_id, cap.held, cap.limit, cap.unit) == (2, 10, 10, "messages")
    assert str(cap) == "queue 2 would hold more than its 10 messages (it holds 10)"
    unknown = errors.UnknownQueue(9)
    assert isinstance(unknown, KeyError) and str(unknown) == "unknown queue id 9"  # not KeyError's repr
