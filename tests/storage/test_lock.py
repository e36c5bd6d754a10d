"""The data directory lock: one owner at a time, refused at once, gone with its process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chunkmq.storage.lock import LOCK_FILE, DirectoryLock, DirectoryLocked


def test_a_second_owner_is_refused_and_named(tmp_path: Path) -> None:
    first = DirectoryLock.acquire(tmp_path)
    assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DirectoryLocked) as refused:
        DirectoryLock.acquire(tmp_path)
    assert refused.value.pid == os.getpid()
    assert str(tmp_path) in str(refused.value)
    first.release()
    again = DirectoryLock.acquire(tmp_path)  # released: the next owner gets it at once
    assert again.held
    again.release()
    again.release()  # idempotent
    assert not again.held


def test_refusal_changes_nothing_on_disk(tmp_path: Path) -> None:
    lock = DirectoryLock.acquire(tmp_path)
    before = (tmp_path / LOCK_FILE).stat()
    with pytest.raises(DirectoryLocked):
        DirectoryLock.acquire(tmp_path)
    after = (tmp_path / LOCK_FILE).stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    lock.release()


def test_a_missing_directory_is_created_private(tmp_path: Path) -> None:
    lock = DirectoryLock.acquire(tmp_path / "new" / "data")
    assert (tmp_path / "new" / "data").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new" / "data" / LOCK_FILE).stat().st_mode & 0o777 == 0o600
    lock.release()
