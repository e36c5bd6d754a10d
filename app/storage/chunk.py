"""Log chunk files (format version 2; version 1 is read too).

A chunk file is ``HEADER (64) + data region (data_size) + FOOTER (64)`` bytes long; it is created at
full size and preallocated (posix_fallocate) so it can be mmapped once and written fast. All integers little-endian.

Header, at file offset 0::

    0   8   magic         b"CMQCHUNK"
    8   2   version       u16: the record format of the chunk's records (record.py): 2, or 1 for
                                chunks written before format 2 (read, never appended to)
    10  2   header_size   u16 = 64
    12  4   flags         u32  bit 0 = REWRITTEN (written by the collector, see below); 0 otherwise
    16  8   chunk number  u64
    24  8   data_size     u64  bytes in the data region (the store's chunk size)
    32  8   created_ms    u64  UTC epoch ms
    40  4   crc32         u32  of bytes 0..39
    44  20  zero

Data region: records (see record.py) from data offset 0, back to back; the first zero length prefix
ends the data. Global position of a record = chunk number * data_size + its data offset.

Footer, at file offset 64 + data_size, written once when the chunk is sealed (then read-only)::

    0   8   magic         b"CMQSEALD"
    8   8   data_bytes    u64  bytes of records in the data region
    16  8   records       u64
    24  8   first_ts      u64  timestamp of the first record (0 if none)
    32  8   last_ts       u64
    40  8   sealed_ms     u64
    48  4   crc32         u32  of bytes 0..47
    52  12  zero

A rewritten chunk (app/storage/gc.py) holds the live records of one or more neighbouring chunks
``number .. last`` copied back to back in log order, and is a sparse file: only its header, records,
moved table and footer take blocks. Its records keep their global positions (they are the message
ids and what the queue indexes hold); the moved table, at the first 8-aligned data offset after
``data_bytes``, says where each one is now::

    0   8   magic         b"CMQMOVED"
    8   8   count         u64
    16  8   last          u64  highest chunk number this file replaces (``number .. last``)
    24  16n entries       (global position u64, data offset u64), ascending by position
    ..  4   crc32         u32  of everything before it

A chunk is created as ``<name>.tmp``, its header fsynced, then renamed, so a live chunk file always
has a valid header; an invalid one means corruption and the file is quarantined (``.bad``).

Thread-safety: one writer (the store's lock) calls write/seal/rollback; readers call read/views
concurrently. The active chunk is written through a writable mapping of its reserved blocks
(map_writes), or with pwrite where the file system cannot reserve them. Reads copy bytes out of the
mmap; a closed chunk raises ValueError from read().
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from . import files
from .errors import CorruptChunk, StorageError
from .errors import os_failure as _fail
from .model import ReadBuffer
from .record import END_OF_BATCH, VERSION, declared_length, iter_records, record_length

_LITTLE = sys.byteorder == "little"
MAGIC = b"CMQCHUNK"
FOOTER_MAGIC = b"CMQSEALD"
VERSIONS = (1, VERSION)  # the record formats a chunk may hold
HEADER = struct.Struct("<8sHHIQQQ")
FOOTER = struct.Struct("<8sQQQQQ")
CRC = struct.Struct("<I")
HEADER_SIZE = 64
_ZERO_MIB = bytes(1 << 20)  # what an unwritten stretch of a (preallocated) chunk reads as
FOOTER_SIZE = 64
REWRITTEN = 1  # header flag: a chunk written by the collector, with a moved table
MOVED_MAGIC = b"CMQMOVED"
MOVED_HEAD = struct.Struct("<8sQQ")


class Header(NamedTuple):
    """A chunk header's fields (parse_header)."""

    version: int
    flags: int
    number: int
    data_size: int
    created_ms: int


class Footer(NamedTuple):
    """A footer's fields (parse_footer)."""

    data_bytes: int
    records: int
    first_ts: int
    last_ts: int


def parse_header(raw: bytes) -> Header:
    """The header at the start of `raw`; raises ValueError saying what is wrong with it."""
    if len(raw) < HEADER_SIZE:
        raise ValueError("header truncated")
    magic, version, hsize, flags, number, data_size, created = HEADER.unpack_from(raw)
    if magic != MAGIC or version not in VERSIONS or hsize != HEADER_SIZE:
        raise ValueError(f"bad magic or version (not a chunk file of format version {' or '.join(map(str, VERSIONS))})")
    if CRC.unpack_from(raw, HEADER.size)[0] != zlib.crc32(raw[: HEADER.size]):
        raise ValueError("header CRC mismatch")
    return Header(version, flags, number, data_size, created)


def parse_footer(raw: bytes) -> Footer | None:
    """The footer at the start of `raw`, or None when there is no valid one (a live chunk)."""
    if len(raw) < FOOTER_SIZE:
        return None
    magic, data_bytes, records, first_ts, last_ts, _ = FOOTER.unpack_from(raw)
    if magic != FOOTER_MAGIC or CRC.unpack_from(raw, FOOTER.size)[0] != zlib.crc32(raw[: FOOTER.size]):
        return None
    return Footer(data_bytes, records, first_ts, last_ts)


def parse_moved(buf: ReadBuffer, start: int, data_bytes: int, end: int) -> tuple[array[int], array[int], int] | None:
    """The moved table of a rewritten chunk whose data region starts at `start` in `buf` and ends at
    `end`: (positions, data offsets, last chunk number), or None when it is damaged."""
    at = start + _align8(data_bytes)
    if at + MOVED_HEAD.size > end:
        return None
    magic, count, last = MOVED_HEAD.unpack_from(buf, at)
    stop = at + MOVED_HEAD.size + 16 * count
    if magic != MOVED_MAGIC or stop + CRC.size > end or CRC.unpack_from(buf, stop)[0] != zlib.crc32(buf[at:stop]):
        return None
    table = array("Q")
    table.frombytes(buf[at + MOVED_HEAD.size : stop])  # any bytes-like: array() would take a view's bytes one by one
    if not _LITTLE:
        table.byteswap()
    return table[0::2], table[1::2], last


def moved_table_size(count: int) -> int:
    """Bytes a moved table of ``count`` records takes (plus up to 7 bytes of alignment before it)."""
    return MOVED_HEAD.size + 16 * count + CRC.size


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _preallocate(fd: int, size: int) -> bool:
    """Reserve the chunk's blocks up front: writes into allocated blocks are several times faster
    than into holes, and a full disk shows up here, at a chunk boundary, not in the middle of a batch.
    False where the file system cannot reserve blocks."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        return False
    return True


class Chunk:
    """One open chunk file: header fields, used data size, statistics and an mmap for reads."""

    def __init__(self, path: Path, number: int, data_size: int, created_ms: int, fd: int, flags: int = 0,
                 version: int = VERSION) -> None:
        self.path = path
        self.version = version  # record format of this chunk's records
        self.number = number
        self.data_size = data_size
        self.base = number * data_size  # global position of data offset 0
        self.created_ms = created_ms
        self.fd = fd  # -1 once released: a sealed, synced chunk is only read, through the mmap
        self.mm = mmap.mmap(fd, HEADER_SIZE + data_size + FOOTER_SIZE, access=mmap.ACCESS_READ)
        self.wm: mmap.mmap | None = None  # the active chunk's writable mapping (map_writes)
        self.closed = False
        self.data_bytes = 0
        self.records = 0
        self.first_ts = 0
        self.last_ts = 0
        self.sealed = False
        self.reads_cache = 0
        self.reads_disk = 0
        self.writes = 0
        self.fetched_at = 0.0  # time.monotonic() when fetched back from the bucket (tiered storage); 0: never
        self.flags = flags
        # Rewritten chunks only (REWRITTEN): the global positions of their records, ascending, and
        # each one's data offset; ``last`` is the highest chunk number the file stands for.
        self.moved_positions: array[int] | None = None
        self.moved_offsets: array[int] | None = None
        self.last = number

    @property
    def rewritten(self) -> bool:
        return bool(self.flags & REWRITTEN)

    @property
    def end(self) -> int:
        """Global position after the range of positions this file holds records of."""
        return (self.last + 1) * self.data_size

    @property
    def file_bytes(self) -> int:
        """Bytes the file takes on disk: all of it when preallocated; a rewritten (sparse) chunk's
        header, records, moved table and footer."""
        if self.moved_positions is None:
            return HEADER_SIZE + self.data_size + FOOTER_SIZE
        return HEADER_SIZE + _align8(self.data_bytes) + moved_table_size(len(self.moved_positions)) + FOOTER_SIZE

    def local_of(self, position: int) -> int:
        """Data offset of the record at global ``position``; -1 if this file does not hold it."""
        moved = self.moved_positions
        if moved is None:
            return position - self.base
        i = bisect_left(moved, position)
        if i < len(moved) and moved[i] == position:
            return self.moved_offsets[i]  # type: ignore[index]
        return -1

    def position_of(self, local: int) -> int:
        """Global position of the record at data offset ``local`` (a record start)."""
        offsets = self.moved_offsets
        if offsets is None:
            return self.base + local
        return self.moved_positions[bisect_left(offsets, local)]  # type: ignore[index]

    # --- life cycle ---
    @classmethod
    def create(cls, root: Path, number: int, data_size: int, created_ms: int, version: int = VERSION) -> Chunk:
        """A new empty chunk; ``version`` lets a copy of old records keep their format."""
        path = files.chunk_path(root, number)
        tmp = files.with_suffix(path, files.TMP_SUFFIX)
        head = HEADER.pack(MAGIC, version, HEADER_SIZE, 0, number, data_size, created_ms)
        fd = files.create_file(tmp)
        try:
            os.pwrite(fd, head + CRC.pack(zlib.crc32(head)), 0)
            os.ftruncate(fd, HEADER_SIZE + data_size + FOOTER_SIZE)
            reserved = _preallocate(fd, HEADER_SIZE + data_size + FOOTER_SIZE)
            os.fsync(fd)
            os.rename(tmp, path)
            files.fsync_dir(path.parent)
        except OSError as exc:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise _fail(exc, f"creating chunk {number}") from exc
        chunk = cls(path, number, data_size, created_ms, fd, 0, version)
        if reserved:
            chunk.map_writes(reserved=True)
        return chunk

    @classmethod
    def open(cls, path: Path, number: int, data_size: int) -> Chunk:
        """Open an existing chunk; raises CorruptChunk if its header is invalid."""
        fd = os.open(path, os.O_RDWR)
        try:
            try:
                version, flags, num, dsize, created = parse_header(os.pread(fd, HEADER_SIZE, 0))
            except ValueError as exc:
                raise CorruptChunk(f"chunk {number}: {exc}", chunk=number) from None
            if num != number:
                raise CorruptChunk(f"chunk {number}: header says chunk {num}", chunk=number)
            if dsize != data_size:
                raise StorageError(
                    f"chunk {number} has data size {dsize}, the store is opened with chunk_size={data_size}"
                )
            full = HEADER_SIZE + data_size + FOOTER_SIZE
            if os.fstat(fd).st_size < full:
                size = os.fstat(fd).st_size
                os.ftruncate(fd, full)  # a truncated file: the lost part reads as zeros (end of data)
                _preallocate(fd, full)
                os.pwrite(fd, bytes(min(full - size, 4096)), size)
            return cls(path, number, data_size, created, fd, flags, version)
        except BaseException:
            os.close(fd)
            raise

    def read_footer(self) -> bool:
        """Load data_bytes/records/timestamps from a valid footer; False if there is none."""
        off = HEADER_SIZE + self.data_size
        footer = parse_footer(self.mm[off : off + FOOTER_SIZE])
        if footer is None:
            return False
        data_bytes, records, first_ts, last_ts = footer
        if data_bytes > self.data_size:
            return False
        self.data_bytes, self.records, self.first_ts, self.last_ts = data_bytes, records, first_ts, last_ts
        self.sealed = True
        if self.rewritten:
            self._load_moved()
        return True

    def _load_moved(self) -> None:
        table = parse_moved(self.mm, HEADER_SIZE, self.data_bytes, HEADER_SIZE + self.data_size)
        if table is None:
            raise CorruptChunk(f"chunk {self.number}: moved table damaged", chunk=self.number)
        self.moved_positions, self.moved_offsets, self.last = table

    @classmethod
    def write_rewritten(
        cls,
        path: Path,
        number: int,
        last: int,
        data_size: int,
        parts: Sequence[bytes],
        positions: Sequence[int],
        timestamps: tuple[int, int],
        created_ms: int,
        sealed_ms: int,
        version: int = VERSION,
    ) -> None:
        """Write a complete, sealed, fsynced rewritten chunk file at ``path`` (a temporary name);
        ``version`` is the record format of the copied records (that of the chunks they come from).

        ``parts`` are whole records in log order, ``positions`` their global positions. The file is
        sparse: the blocks between the moved table and the footer are never written.
        """
        offsets = array("Q")
        local = 0
        for part in parts:
            offsets.append(local)
            local += len(part)
        table = array("Q", [x for pair in zip(positions, offsets, strict=True) for x in pair])
        if not _LITTLE:
            table.byteswap()
        moved = MOVED_HEAD.pack(MOVED_MAGIC, len(parts), last) + table.tobytes()
        moved += CRC.pack(zlib.crc32(moved))
        at = _align8(local)
        if at + len(moved) > data_size:
            raise ValueError("the records and their moved table do not fit in one chunk")
        head = HEADER.pack(MAGIC, version, HEADER_SIZE, REWRITTEN, number, data_size, created_ms)
        foot = FOOTER.pack(FOOTER_MAGIC, local, len(parts), timestamps[0], timestamps[1], sealed_ms)
        fd = files.create_file(path)
        try:
            os.ftruncate(fd, HEADER_SIZE + data_size + FOOTER_SIZE)
            body = b"".join([head, CRC.pack(zlib.crc32(head)), bytes(HEADER_SIZE - HEADER.size - CRC.size),
                             *parts, bytes(at - local), moved])
            done = 0
            while done < len(body):
                done += os.pwrite(fd, memoryview(body)[done:], done)
            os.pwrite(fd, foot + CRC.pack(zlib.crc32(foot)), HEADER_SIZE + data_size)
            os.fsync(fd)
        except OSError as exc:
            path.unlink(missing_ok=True)
            raise _fail(exc, f"rewriting chunk {number}") from exc
        finally:
            os.close(fd)

    def map_writes(self, reserved: bool = False) -> None:
        """Map the chunk for writing, once its blocks are reserved: an append is then a copy into the
        page cache, where a pwrite was a system call and an inode update per append (a tenth of a
        one-message publish). A write never goes through a mapping into a hole: if the disk could not
        fill it, the process would die of SIGBUS where pwrite fails with ENOSPC. Dirty pages of the
        mapping are the file's own: fdatasync (`sync`) writes them, and a killed process loses none."""
        if self.wm is None and self.fd >= 0 and not self.sealed and not self.rewritten:
            size = HEADER_SIZE + self.data_size + FOOTER_SIZE
            if reserved or _preallocate(self.fd, size):  # `reserved`: by the caller, just now
                self.wm = mmap.mmap(self.fd, size)

    def _unmap_writes(self) -> None:
        if self.wm is not None:
            self.wm.close()
            self.wm = None

    def seal(self, now_ms: int) -> None:
        body = FOOTER.pack(FOOTER_MAGIC, self.data_bytes, self.records, self.first_ts, self.last_ts, now_ms)
        try:
            os.pwrite(self.fd, body + CRC.pack(zlib.crc32(body)), HEADER_SIZE + self.data_size)
        except OSError as exc:
            raise _fail(exc, f"sealing chunk {self.number}") from exc
        self.sealed = True
        self._unmap_writes()

    def release_fd(self) -> None:
        """Close the file descriptor of a sealed chunk (the mmap stays valid): bounds open files."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._unmap_writes()
            self.mm.close()
            self.release_fd()

    # --- write path (writer only) ---
    def write(self, local: int, buf: bytes) -> None:
        """Write ``buf`` at data offset ``local``; on error, undo whatever part was written."""
        off = HEADER_SIZE + local
        wm = self.wm
        if wm is not None:  # reserved blocks: nothing can fail
            wm[off : off + len(buf)] = buf
            self.writes += 1
            return
        done = 0
        try:
            done = os.pwrite(self.fd, buf, off)  # the whole of it, but on a disk that is filling up
            while done < len(buf):
                done += os.pwrite(self.fd, memoryview(buf)[done:], off + done)
        except OSError as exc:
            self.rollback(local, local + done)
            raise _fail(exc, f"writing chunk {self.number}") from exc
        self.writes += 1

    def rollback(self, local: int, upto: int) -> None:
        """Zero the data region [local, upto): what was written there reads as end of data again.

        Zeros are written over the (preallocated) blocks rather than punched out, so the file keeps
        no holes: on tmpfs, touching a hole through the mmap when the disk is full raises SIGBUS.
        """
        zeros = bytes(min(upto - local, 1 << 20))
        off = local
        try:
            while off < upto:
                n = min(len(zeros), upto - off)
                os.pwrite(self.fd, zeros[:n] if n < len(zeros) else zeros, HEADER_SIZE + off)
                off += n
        except OSError:
            # no space even for zeros (blocks were never allocated): punch them out instead
            full = HEADER_SIZE + self.data_size + FOOTER_SIZE
            os.ftruncate(self.fd, HEADER_SIZE + local)
            os.ftruncate(self.fd, full)

    def sync(self) -> None:
        fd = self.fd
        if fd < 0:
            return
        try:
            os.fdatasync(fd)
        except OSError:
            if self.fd >= 0 and not self.closed:  # not just released or deleted meanwhile
                raise

    # --- read path ---
    def read(self, local: int, size: int) -> bytes:
        off = HEADER_SIZE + local
        return self.mm[off : off + size]

    def scan(self, local: int, limit: int) -> tuple[int, int, int, int, int]:
        """Validate records from data offset ``local`` up to ``limit``.

        Returns (batch_end, records, first_ts, last_ts, scan_end): the data offset after the last
        record that carries END_OF_BATCH, the number of records and timestamps up to it, and the
        offset where validation stopped (first invalid or zero record).
        """
        base = HEADER_SIZE
        p = base + local  # where validation stopped: after the last valid record
        batch_end = local
        batch_first_ts = first_ts = last_ts = 0
        records = pending = 0
        for off, n, ts, flags, *_ in iter_records(self.mm, p, base + limit, self.version):
            if not pending:
                batch_first_ts = ts
            pending += 1
            p = off + n
            if flags & END_OF_BATCH:
                records += pending
                pending = 0
                first_ts = first_ts or batch_first_ts
                last_ts = ts
                batch_end = p - base
        return batch_end, records, first_ts, last_ts, p - base

    def data_extent(self, local: int) -> int:
        """Data offset after the last non-zero byte at or after ``local`` (stops at a zero MiB)."""
        off = HEADER_SIZE + local
        end = HEADER_SIZE + self.data_size
        step = len(_ZERO_MIB)
        while off < end:
            block = self.mm[off : min(end, off + step)]
            if block == _ZERO_MIB[: len(block)]:  # a clean tail, as every restart's is: compared, not stripped
                return off - HEADER_SIZE  # (rstrip goes byte by byte: milliseconds per MiB)
            stripped = len(block.rstrip(b"\0"))
            if stripped < len(block):
                return off + stripped - HEADER_SIZE
            off += len(block)
        return self.data_size

    def valid_record_after(self, local: int, limit: int) -> bool:
        """Whether the invalid record at ``local`` is followed by a valid one (a flipped bit in the
        middle of good data, rather than a torn tail)."""
        off = HEADER_SIZE + local
        n = declared_length(self.mm, off, HEADER_SIZE + limit, self.version)
        nxt = off + n
        return (n > 0 and nxt < HEADER_SIZE + limit
                and record_length(self.mm, nxt, HEADER_SIZE + limit, self.version) > 0)
