"""One process per data directory: an exclusive `flock` on `<data dir>/LOCK`.

Two servers on one directory would both recover the live files and hand out the same offsets and
ids, each overwriting what the other acknowledged. So a server takes this lock before it reads,
recovers or creates anything else in the directory. The file holds the owner's PID (text, one line)
so the refusal can name it. The kernel drops a `flock` with its process, so a `kill -9` leaves
nothing to clean up: the LOCK file stays, unlocked, and the next server takes it at once.

Opening never truncates the file: a refused second server changes nothing on disk.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from . import files
from .errors import StorageError

LOCK_FILE = "LOCK"


class DirectoryLocked(StorageError):
    """Raised when another process holds the data directory's lock."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"process {pid}" if pid else "another process"
        super().__init__(f"data directory {directory} is in use by {holder} (lock file {directory / LOCK_FILE})")


class DirectoryLock:
    """Held while open; `release()` (or the process ending) lets the next owner in."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> DirectoryLock:
        """Lock `directory` (created 0700 if missing) or raise DirectoryLocked at once (no waiting)."""
        directory = Path(directory).resolve()
        directory.mkdir(mode=files.DIR_MODE, parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, files.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DirectoryLocked(directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock (idempotent). The PID stays in the file; it is only read when the lock is taken."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
