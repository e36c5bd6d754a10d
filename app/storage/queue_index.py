"""Queue index chunk files (format version 1): entry n of a queue's index is queue offset n.

A queue's entries live in files ``queues/<queue id>/<base offset>.idx``, each holding ``capacity``
entries (the store's index_chunk_entries) for offsets base .. base+capacity-1. Files are created
at full size (sparse); the blocks a write needs are reserved before it (IndexFile.write). All
integers little-endian.

Header, 32 bytes::

    0   8   magic        b"CMQINDEX"
    8   2   version      u16 = 1
    10  2   reserved     u16
    12  4   queue id     u32
    16  8   base offset  u64
    24  4   capacity     u32  entries in this file
    28  4   crc32        u32  of bytes 0..27

Entry n (at 32 + 16 * (n - base)), 16 bytes::

    0   8   position + 1  u64  global position of the record plus one; 0 = empty (end of the index)
    8   4   length        u32  of the whole record on disk (one read fetches it)
    12  4   tag hash      u32  model.tag_hash(tag); 0 = no tag

Entries are not checksummed: every index can be rebuilt from the log, whose records carry their
placements. Positions increase with the offset, which makes binary searches possible.

Thread-safety: one writer (the store's lock) calls write/zero/delete; readers call entries()
concurrently; a reader that races with retention may get ValueError from a closed mmap.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import sys
import threading
import zlib
from array import array
from pathlib import Path

from . import files
from .errors import CorruptChunk
from .errors import os_failure as _fail

MAGIC = b"CMQINDEX"
VERSION = 1
HEADER = struct.Struct("<8sHHIQI")
CRC = struct.Struct("<I")
HEADER_SIZE = 32
ENTRY = struct.Struct("<QII")  # position + 1, length, tag hash: the one spelling of an entry
ENTRY_SIZE = ENTRY.size
ENTRY_DTYPE = [("p1", "<u8"), ("len", "<u4"), ("th", "<u4")]  # ENTRY for numpy (Store.read_columns)
_POSITION = struct.Struct("<Q8x")  # an entry's position + 1 alone
_BLOCK = 4096  # file system block: punch_below frees whole ones
_LITTLE = sys.byteorder == "little"
_OPENING = threading.Lock()  # taken once per deferred queue, on its first use (QueueIndex.files)


def used_entries(raw: bytes) -> int:
    """How many entries at the start of `raw` are set (up to the first empty one)."""
    used = 0
    for (p1,) in _POSITION.iter_unpack(raw):
        if not p1:
            break
        used += 1
    return used


def index_file_size(entries: int) -> int:
    """Bytes of an index file of `entries` entries (its header included)."""
    return HEADER_SIZE + ENTRY_SIZE * entries


def pack_entries(flat: list[int]) -> bytes:
    """Pack ``[pos+1, length | tag_hash << 32, ...]`` into entries with one C call."""
    arr = array("Q", flat)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def unpack_entries(data: bytes) -> list[int]:
    """The flat list pack_entries packed."""
    arr = array("Q")
    arr.frombytes(data)
    if not _LITTLE:
        arr.byteswap()
    return arr.tolist()


class IndexFile:
    """One index chunk file, mmapped for reads, and for writes into the blocks it has reserved."""

    def __init__(self, path: Path, base: int, capacity: int, fd: int) -> None:
        self.path = path
        self.base = base
        self.capacity = capacity
        self.fd = fd
        self.mm = mmap.mmap(fd, HEADER_SIZE + capacity * ENTRY_SIZE)
        # The bytes [start, end) whose blocks are reserved (posix_fallocate) for writes through the
        # mapping: the blocks of the last write that needed new ones, which a pwrite into the sparse
        # file would have allocated too (the disk budget counts them so). `reservable` is False where
        # the file system cannot reserve blocks: writes are pwrites then.
        self.reserved = (0, 0)
        self.reservable = True
        self.dirty = False
        self.punched = _BLOCK  # entries below this byte are holes (punch_below); the header's block stays

    @classmethod
    def create(cls, root: Path, queue_id: int, base: int, capacity: int) -> IndexFile:
        path = files.index_path(root, queue_id, base)
        head = HEADER.pack(MAGIC, VERSION, 0, queue_id, base, capacity)
        fd = files.create_file(path)
        try:
            os.pwrite(fd, head + CRC.pack(zlib.crc32(head)), 0)
            os.ftruncate(fd, HEADER_SIZE + capacity * ENTRY_SIZE)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise _fail(exc, f"creating index file {path.name} of queue {queue_id}") from exc
        f = cls(path, base, capacity, fd)
        f.dirty = True
        return f

    @classmethod
    def open(cls, path: Path, queue_id: int, base: int, capacity: int) -> IndexFile:
        """Open an index file; raises CorruptChunk if the header or the file size is wrong."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, HEADER_SIZE, 0)
            if len(raw) < HEADER_SIZE or CRC.unpack_from(raw, HEADER.size)[0] != zlib.crc32(raw[: HEADER.size]):
                raise CorruptChunk(f"index file {path}: bad header")
            magic, version, _, qid, b, cap = HEADER.unpack_from(raw)
            if (magic, version, qid, b, cap) != (MAGIC, VERSION, queue_id, base, capacity):
                raise CorruptChunk(f"index file {path}: header does not match its name or capacity")
            if os.fstat(fd).st_size != HEADER_SIZE + capacity * ENTRY_SIZE:
                raise CorruptChunk(f"index file {path}: truncated")
            return cls(path, base, capacity, fd)
        except BaseException:
            os.close(fd)
            raise

    def write(self, offset: int, data: bytes) -> None:
        """Entries from `offset`: copied through the mapping into reserved blocks (a pwrite was a system
        call and an inode update per publish), else written with pwrite. Never through the mapping
        into a hole: if the disk could not fill it, the process would die of SIGBUS where pwrite
        fails with ENOSPC. fsync writes the mapping's dirty pages as any others."""
        start = HEADER_SIZE + (offset - self.base) * ENTRY_SIZE
        end = start + len(data)
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_RDWR)
            lo, hi = self.reserved
            if (lo <= start and end <= hi) or self._reserve(start, end):
                self.mm[start:end] = data
            else:
                done = os.pwrite(self.fd, data, start)
                while done < len(data):  # a full file system writes short first, then fails with ENOSPC
                    done += os.pwrite(self.fd, memoryview(data)[done:], start + done)
        except OSError as exc:
            raise _fail(exc, f"writing index file {self.path}") from exc
        self.dirty = True

    def _reserve(self, start: int, end: int) -> bool:
        """Reserve the blocks of [start, end) (one system call per 256 entries of one-message publishes);
        False where the file system cannot. A full disk raises here (ENOSPC), before anything is written."""
        if not self.reservable:
            return False
        lo = start - start % _BLOCK
        hi = min(end + -end % _BLOCK, HEADER_SIZE + self.capacity * ENTRY_SIZE)
        try:
            os.posix_fallocate(self.fd, lo, hi - lo)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            self.reservable = False
            return False
        self.reserved = (lo, hi)
        return True

    def raw(self, offset: int, count: int) -> bytes:
        start = HEADER_SIZE + (offset - self.base) * ENTRY_SIZE
        return self.mm[start : start + count * ENTRY_SIZE]

    def pread(self, offset: int, count: int) -> bytes:
        """Entries read with pread, not the mmap: for ranges that may be holes of the sparse file
        (touching a hole through the mmap on a full tmpfs raises SIGBUS)."""
        start = HEADER_SIZE + (offset - self.base) * ENTRY_SIZE
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, count * ENTRY_SIZE, start)
        finally:
            os.close(fd)
        return data.ljust(count * ENTRY_SIZE, b"\0")

    def punch_below(self, offset: int) -> int:
        """Free the whole blocks of entries below ``offset`` (they read as empty afterwards); the
        header's block stays. Returns the allocated bytes given back."""
        end = HEADER_SIZE + (min(offset, self.base + self.capacity) - self.base) * ENTRY_SIZE
        end -= end % _BLOCK
        if end <= self.punched:
            return 0
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return 0
        try:
            before = os.fstat(fd).st_blocks
            if files.punch_hole(fd, self.punched, end - self.punched):
                self.punched = end
                lo, hi = self.reserved
                self.reserved = (max(lo, end), max(hi, end))  # punched blocks are holes again
            return (before - os.fstat(fd).st_blocks) * 512
        except OSError as exc:
            raise _fail(exc, f"freeing consumed entries of index file {self.path}") from exc
        finally:
            os.close(fd)

    def sync(self) -> None:
        fd = self.fd
        if self.dirty and fd >= 0:
            self.dirty = False
            os.fsync(fd)

    def release_fd(self) -> None:
        """Close the descriptor (the mmap stays valid); write() reopens it if ever needed."""
        if self.fd >= 0 and not self.dirty:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        self.mm.close()  # idempotent; a racing reader gets ValueError
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class QueueIndex:
    """A queue's index files and its counters: first (lowest readable), next (end) offset, bytes."""

    def __init__(self, root: Path, queue_id: int, capacity: int) -> None:
        self.root = root
        self.queue_id = queue_id
        self.capacity = capacity
        self._files: dict[int, IndexFile] | None = {}  # None: not opened yet (defer_files)
        self.first = 0
        self.next = 0
        self.bytes = 0
        # Live-byte accounting for the collector: per chunk number (global position // chunk size),
        # the record bytes of this queue's entries in [floor, next) pointing into it. append() adds
        # a batch's bytes once; a floor move subtracts what it passes (raise_floor). The floor is
        # what retain() was last told the queue needs (>= first: retention keeps first at the lowest
        # offset still readable, which a pinned chunk keeps below the floor).
        self.floor = 0
        self.chunk_bytes: dict[int, int] = {}
        self.wanted: int | None = None  # the floor retain() was last given (a group seeking back lowers it)
        self._punch_below = 0  # drop_files_below's previous offset
        self._punched_to = 0  # and the one before it: entries below it are punched out

    # --- opening ---
    @property
    def files(self) -> dict[int, IndexFile]:
        """The open index files by base offset; a deferred queue opens them here, on first use."""
        opened = self._files
        if opened is None:
            with _OPENING:
                if self._files is None:
                    self._open_deferred()
            opened = self._files
            assert opened is not None
        return opened

    def load_files(self) -> bool:
        """Open the queue's index files; False if one is damaged (the caller rebuilds)."""
        self._files, ok = self._open_files()
        return ok

    def _open_files(self) -> tuple[dict[int, IndexFile], bool]:
        ok = True
        opened: dict[int, IndexFile] = {}
        for base, path in files.list_index_files(self.root, self.queue_id):
            if base % self.capacity:
                ok = False
                continue
            try:
                opened[base] = IndexFile.open(path, self.queue_id, base, self.capacity)
            except CorruptChunk:
                ok = False
        return opened, ok

    def defer_files(self) -> None:
        """Open nothing until the queue is used (recovery, for a queue the checkpoint says is empty
        and nothing since appended to): a start with many idle queues opens no file per queue."""
        self._files = None

    def _open_deferred(self) -> None:
        """A deferred queue's first use: its files opened (a damaged one is left out, and created
        again when written), and the entries a torn append left past its end cleared, as recovery
        does for every queue it opens. Only then is `files` set: no writer sees it earlier."""
        opened, _ok = self._open_files()
        self._zero(opened, self.next)
        self._files = opened

    @property
    def opened(self) -> bool:
        """Whether the index files are open (False for a deferred queue not used yet)."""
        return self._files is not None

    def covers(self) -> bool:
        """Whether files exist for every offset in [first, next) and the last entry is set."""
        if self.next <= self.first:
            return True
        base = self.first - self.first % self.capacity
        while base < self.next:
            if base not in self.files:
                return False
            base += self.capacity
        return self.entry(self.next - 1)[0] > 0

    def reset(self) -> None:
        """Drop every index file (before a rebuild from the log)."""
        if self._files is None:
            self.load_files()
        for f in self.files.values():
            f.close()
            f.path.unlink(missing_ok=True)
        self.files.clear()

    # --- writing ---
    def _file_for(self, offset: int) -> IndexFile:
        base = offset - offset % self.capacity
        f = self.files.get(base)
        if f is None:
            files.queue_dir(self.root, self.queue_id).mkdir(mode=files.DIR_MODE, parents=True, exist_ok=True)
            f = IndexFile.create(self.root, self.queue_id, base, self.capacity)
            self.files[base] = f
        return f

    def write(self, offset: int, flat: list[int]) -> None:
        """Write entries for offsets ``offset ..`` from a flat ``[pos+1, len | th << 32, ...]`` list."""
        self.write_packed(offset, pack_entries(flat))

    def write_packed(self, offset: int, data: bytes) -> None:
        """Write entries for offsets ``offset ..``, packed as pack_entries packs them."""
        f = self._files.get(offset - offset % self.capacity) if self._files is not None else None
        if f is not None and len(data) == ENTRY_SIZE:  # one entry, into an open file: a one-message publish
            f.write(offset, data)
            return
        count = len(data) // ENTRY_SIZE
        while count:
            f = self._file_for(offset)
            n = min(count, f.base + f.capacity - offset)
            f.write(offset, data[: n * ENTRY_SIZE] if n < count else data)
            data = data[n * ENTRY_SIZE :]
            offset += n
            count -= n

    def zero_from(self, offset: int) -> int:
        """Clear entries from ``offset`` up to the first empty one; returns how many were set
        (0 for a deferred queue: its first use does it)."""
        return 0 if self._files is None else self._zero(self._files, offset)

    def _zero(self, opened: dict[int, IndexFile], offset: int) -> int:
        """zero_from on `opened`. Reads a few entries first, and twice as many each time they are all
        set: after a clean stop the first is empty, and the unused rest of the file (up to its whole
        capacity, megabytes of zeros) is not read by every start."""
        cleared = 0
        step = 256
        while True:
            f = opened.get(offset - offset % self.capacity)
            if f is None:
                return cleared
            n = min(step, f.base + f.capacity - offset)
            used = used_entries(f.pread(offset, n))
            if used:
                f.write(offset, bytes(used * ENTRY_SIZE))
                cleared += used
            if used < n:
                return cleared
            offset += n
            step *= 2

    def drop_files_below(self, offset: int) -> tuple[int, int]:
        """Delete files whose entries are all below ``offset`` (keeping the one holding next - 1),
        and punch out the blocks of entries below the previous call's offset in the files kept.

        The file holding next - 1 stays however far the floor has passed it, which for a consumed
        queue would keep all its dead entries allocated; punching gives them back. It goes one call
        late so that a reader that took its offsets before the floor moved never reads a hole
        through the mmap (on tmpfs that allocates a page, and a full tmpfs raises SIGBUS). The
        caller has made the floor durable first, so a restart never starts below a hole.

        Returns (files deleted, bytes freed)."""
        deleted = freed = 0
        for base in sorted(self.files):
            if base + self.capacity <= offset and base + self.capacity < self.next:
                f = self.files.pop(base)
                freed += HEADER_SIZE + f.capacity * ENTRY_SIZE
                f.close()
                f.path.unlink(missing_ok=True)
                deleted += 1
        for f in self.files.values():
            if f.base < self._punch_below:
                freed += f.punch_below(self._punch_below)
        self._punched_to, self._punch_below = self._punch_below, max(self._punch_below, offset)
        return deleted, freed

    def punch_pending(self) -> bool:
        """Whether the next drop_files_below has entries to punch out (its offset moved at the last)."""
        return self._punch_below > self._punched_to

    # sync, release_old_fds and close leave a deferred queue's files unopened: nothing to do there
    def sync(self) -> None:
        for f in list((self._files or {}).values()):
            f.sync()

    def release_old_fds(self) -> None:
        """Keep a descriptor open only for the newest file (writer lock held)."""
        opened = self._files or {}
        if len(opened) > 1:
            newest = max(opened)
            for base, f in list(opened.items()):
                if base != newest:
                    f.release_fd()

    def close(self) -> None:
        for f in (self._files or {}).values():
            f.close()
        self._files = {}

    # --- reading ---
    def raw(self, offset: int, count: int) -> bytes:
        """Packed entries for ``offset .. offset+count-1`` (missing files read as empty entries)."""
        parts: list[bytes] = []
        while count > 0:
            base = offset - offset % self.capacity
            n = min(count, base + self.capacity - offset)
            f = self.files.get(base)
            parts.append(f.raw(offset, n) if f is not None else bytes(n * ENTRY_SIZE))
            offset += n
            count -= n
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def entry(self, offset: int) -> tuple[int, int, int]:
        """(position + 1, length, tag hash) of one offset; (0, 0, 0) if empty or missing."""
        f = self.files.get(offset - offset % self.capacity)
        if f is None:
            return (0, 0, 0)
        return ENTRY.unpack(f.raw(offset, 1))

    def first_at_or_after(self, lo: int, hi: int, position: int) -> int:
        """Lowest offset in [lo, hi) whose record position is >= ``position`` (hi if none)."""
        while lo < hi:
            mid = (lo + hi) // 2
            probe = mid
            p = self.entry(probe)[0]
            while not p and probe + 1 < hi:  # a hole (lost data): judge by the next set entry
                probe += 1
                p = self.entry(probe)[0]
            if p and p - 1 < position:
                lo = probe + 1
            else:
                hi = mid
        return lo

    def bytes_between(self, lo: int, hi: int) -> int:
        total = 0
        step = 1 << 16
        while lo < hi:
            n = min(step, hi - lo)
            words = array("I", self.raw(lo, n))  # 4 u32 per entry: position (2), length, tag hash
            if not _LITTLE:
                words.byteswap()
            total += sum(words[2::4])
            lo += n
        return total

    def bytes_by_chunk(self, lo: int, hi: int, chunk_size: int) -> dict[int, int]:
        """Record bytes of the entries in [lo, hi), per chunk number: a binary search per chunk
        boundary and a sum per chunk, never a look at the log."""
        out: dict[int, int] = {}
        while lo < hi:
            p1 = self.entry(lo)[0]
            if not p1:  # a hole (data lost to a quarantine): no bytes
                lo += 1
                continue
            number = (p1 - 1) // chunk_size
            stop = self.first_at_or_after(lo, hi, (number + 1) * chunk_size)
            out[number] = out.get(number, 0) + self.bytes_between(lo, stop)
            lo = stop
        return out

    def raise_floor(self, floor: int, chunk_size: int) -> None:
        """Move the floor up to ``floor`` (at most next): subtract the passed entries from chunk_bytes."""
        floor = min(floor, self.next)
        if floor <= self.floor:
            return
        counts = self.chunk_bytes
        for number, n in self.bytes_by_chunk(self.floor, floor, chunk_size).items():
            left = counts.get(number, 0) - n
            if left > 0:
                counts[number] = left
            else:
                counts.pop(number, None)
        self.floor = floor

    def recount(self, chunk_size: int) -> None:
        """Rebuild chunk_bytes from the index (on open, after recovery): the floor starts at first."""
        self.floor = self.first
        self.chunk_bytes = {n: b for n, b in self.bytes_by_chunk(self.first, self.next, chunk_size).items() if b}
