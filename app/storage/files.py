"""Every file name of a store directory is built (and parsed) here, nowhere else.

Layout under the store directory::

    log/<chunk number, 20 digits>.chunk          message log chunks
    log/<chunk number, 20 digits>.chunk.bad      quarantined chunk (never read again)
    log/<chunk number, 20 digits>.chunk.tmp      chunk being created (header not yet durable)
    queues/<queue id, 10 digits>/<base offset, 20 digits>.idx   queue index chunks
    checkpoint                                   recovery point (checkpoint.tmp while written)

Numbers are zero-padded so that ``ls`` sorts files numerically; names never come from user input.

Every directory is created mode 0700 and every file 0600 (DIR_MODE, FILE_MODE): the data directory
holds messages and tokens, which are nobody else's to read, whatever the process umask.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

LOG_DIR = "log"
QUEUES_DIR = "queues"
CHECKPOINT = "checkpoint"
CHUNK_SUFFIX = ".chunk"
INDEX_SUFFIX = ".idx"
BAD_SUFFIX = ".bad"
TMP_SUFFIX = ".tmp"
DIR_MODE = 0o700
FILE_MODE = 0o600
_GROUP_OTHER = 0o077


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) mode 0700; an existing one loses group and other access."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & _GROUP_OTHER:
        os.chmod(path, DIR_MODE)


def create_file(path: Path, flags: int = os.O_RDWR) -> int:
    """Open ``path`` for writing, created (or truncated) mode 0600; returns the descriptor."""
    return os.open(path, flags | os.O_CREAT | os.O_TRUNC, FILE_MODE)


def restrict_tree(root: Path, names: Iterable[str]) -> int:
    """Take group and other access from the entries ``names`` of ``root`` and everything under them
    (left by a version that created them with the umask's mode); returns how many were changed.
    Only these: a data directory may be shared with files that are not ours. Symlinks are left."""
    changed = 0
    for name in names:
        top = root / name
        if top.is_symlink() or not top.exists():
            continue
        found = [(str(top), DIR_MODE if top.is_dir() else FILE_MODE)]
        for dirpath, dirnames, filenames in os.walk(top):
            found += [(os.path.join(dirpath, d), DIR_MODE) for d in dirnames]
            found += [(os.path.join(dirpath, f), FILE_MODE) for f in filenames]
        for path, mode in found:
            try:
                st = os.lstat(path)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & _GROUP_OTHER:
                    os.chmod(path, mode)
                    changed += 1
            except FileNotFoundError:
                pass
    return changed


def log_dir(root: Path) -> Path:
    return root / LOG_DIR


def queues_dir(root: Path) -> Path:
    return root / QUEUES_DIR


def chunk_path(root: Path, number: int) -> Path:
    return root / LOG_DIR / f"{number:020d}{CHUNK_SUFFIX}"


def queue_dir(root: Path, queue_id: int) -> Path:
    return root / QUEUES_DIR / f"{queue_id:010d}"


def index_path(root: Path, queue_id: int, base_offset: int) -> Path:
    return queue_dir(root, queue_id) / f"{base_offset:020d}{INDEX_SUFFIX}"


def checkpoint_path(root: Path) -> Path:
    return root / CHECKPOINT


RESERVE = "reserve"
RESERVE_BYTES = 256 * 1024


def reserve_path(root: Path) -> Path:
    return root / RESERVE


def make_reserve(root: Path) -> bool:
    """Keep RESERVE_BYTES allocated in a file of their own, so that on a full disk retention can
    still write the checkpoint it must write before it deletes anything (release_reserve). False
    when there is no room for it now (retried after the next retention)."""
    path = reserve_path(root)
    if path.exists():
        return True
    fd = create_file(with_suffix(path, TMP_SUFFIX))
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        os.close(fd)
        with_suffix(path, TMP_SUFFIX).unlink(missing_ok=True)
        return False
    os.close(fd)
    os.replace(with_suffix(path, TMP_SUFFIX), path)
    return True


def release_reserve(root: Path) -> bool:
    """Give the reserve back to the file system; True when there was one."""
    try:
        reserve_path(root).unlink()
    except FileNotFoundError:
        return False
    return True


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


@functools.cache
def _fallocate() -> Callable[..., int] | None:
    """libc's fallocate, loaded by the first hole punched: ctypes is not imported at start."""
    import ctypes

    return getattr(ctypes.CDLL(None, use_errno=True), "fallocate", None)


def punch_hole(fd: int, start: int, length: int) -> bool:
    """Give the blocks of [start, start + length) back to the file system, keeping the file's size;
    the range reads as zeros afterwards. False where the file system (or the OS) cannot punch holes:
    the blocks stay, and nothing else changes."""
    fallocate = _fallocate()
    if fallocate is None or length <= 0:
        return False
    import ctypes

    mode = _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE
    if fallocate(fd, mode, ctypes.c_int64(start), ctypes.c_int64(length)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err))


def with_suffix(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _numbered(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    found: list[tuple[int, Path]] = []
    if not directory.is_dir():
        return found
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(suffix) and name[: -len(suffix)].isdigit():
            found.append((int(name[: -len(suffix)]), Path(entry.path)))
    found.sort()
    return found


def list_chunks(root: Path) -> list[tuple[int, Path]]:
    """(chunk number, path) of live chunk files, in order (quarantined and temp files excluded)."""
    return _numbered(log_dir(root), CHUNK_SUFFIX)


def list_queue_ids(root: Path) -> list[int]:
    directory = queues_dir(root)
    if not directory.is_dir():
        return []
    return sorted(int(e.name) for e in os.scandir(directory) if e.is_dir() and e.name.isdigit())


def list_index_files(root: Path, queue_id: int) -> list[tuple[int, Path]]:
    """(base offset, path) of a queue's index chunk files, in order."""
    return _numbered(queue_dir(root, queue_id), INDEX_SUFFIX)


def allocated_in(directory: Path) -> int:
    """Bytes allocated by the files directly in ``directory`` (st_blocks); 0 if it is gone."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                except FileNotFoundError:
                    pass  # deleted meanwhile
    except FileNotFoundError:
        pass
    return total


def fsync_dir(path: Path) -> None:
    """Make a create/rename/unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tail_quarantine_path(root: Path, number: int, local: int) -> Path:
    """Where the cut tail of an active chunk is preserved when valid records followed the bad one."""
    return root / LOG_DIR / f"{number:020d}{CHUNK_SUFFIX}.{local:020d}.tail{BAD_SUFFIX}"


def quarantine(path: Path) -> Path:
    """Rename a damaged file out of the way (``.bad``); it is never read again."""
    bad = with_suffix(path, BAD_SUFFIX)
    os.replace(path, bad)
    fsync_dir(path.parent)
    return bad
