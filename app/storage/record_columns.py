"""Record columns: the fields of many format-2 records at once as numpy arrays (what the Arrow
pages and the batch reads take), by the compiled twin or by numpy with one CRC per row or run."""

from __future__ import annotations

import functools
from typing import Any

from isal.isal_zlib import crc32

from .record import (
    CRC_SIZE,
    FRAME,
    HEADER_SIZE,
    L_IDEM,
    L_MULTI,
    L_TAG,
    L_WIDTHS,
    LONG,
    PAYLOAD,
    SHORT_MAX,
    U32,
    WIDTH,
    _recordc,
)


def columns(buf: bytes, starts: Any, lengths: Any, verify: Any) -> tuple[Any, ...]:
    """The fields of the format-2 records at ``starts`` of ``buf`` (whose index entries say
    ``lengths``), for all rows at once: (timestamps, flags, tag_start, tag_len, data_start, data_len,
    valid) as numpy arrays. A row is valid when its prefix and suffix agree with its length, its
    fields fit and (where the bool array ``verify`` says so) its CRC matches; an invalid row's fields
    are zeros. By the compiled twin where it runs, else columns_python."""
    import numpy as np

    if _recordc is None:
        return columns_python(buf, starts, lengths, verify)
    n = len(starts)
    out = np.empty((6, n), np.int64)
    ok = np.empty(n, bool)
    _recordc.columns(buf, np.ascontiguousarray(starts.astype(np.int64, copy=False)),
                     np.ascontiguousarray(lengths.astype(np.int64, copy=False)),
                     np.ascontiguousarray(np.broadcast_to(verify, n), bool), out, ok)
    return (*out, ok)


def columns_python(buf: bytes, starts: Any, lengths: Any, verify: Any) -> tuple[Any, ...]:
    """columns, parsed with numpy: the CRCs are the one loop per row (or per run of rows)."""
    import numpy as np

    size = len(buf)
    b = np.frombuffer(buf + bytes(32), np.uint8)  # the padding keeps every probe of a bad record in range
    s = starts.astype(np.int64)
    n = lengths.astype(np.int64)
    ok = (s >= 0) & (n >= FRAME + HEADER_SIZE) & (n <= size - s)  # not s + n: it may wrap
    s = np.where(ok, s, 0)
    n = np.where(ok, n, FRAME + HEADER_SIZE)

    # unaligned views whose element i is the integer at byte i: one gather per field, not one per byte
    b16 = np.ndarray((size + 1,), "<u2", b, 0, (1,))
    b32 = np.ndarray((size + 1,), "<u4", b, 0, (1,))

    def at(i: Any) -> Any:
        return b[np.minimum(i, size)].astype(np.int64)

    def u16(i: Any) -> Any:
        return b16[np.minimum(i, size)].astype(np.int64)

    def u32(i: Any) -> Any:
        return b32[np.minimum(i, size)].astype(np.int64)

    def u16_where(has: Any, i: Any) -> Any:  # no gather when no row has the field (nearly always)
        return np.where(has, u16(i), 0) if has.any() else np.zeros(len(has), np.int64)

    first = at(s)
    long = first == LONG
    some_long = bool(long.any())  # records over 254 bytes; a page of small messages has none
    p = s + (np.where(long, 9, PAYLOAD) if some_long else PAYLOAD)  # payload start
    plen = np.where(long, u32(s + 1), first) if some_long else first
    end = s + n - (np.where(long, 5, 1) if some_long else 1)  # payload end
    ok &= (plen == end - p) & (plen >= HEADER_SIZE) & (np.where(long, plen > SHORT_MAX, plen > 0))
    ok &= np.where(long, at(end + 4) == LONG, at(end) == plen) if some_long else at(end) == plen
    ts = u32(p) | u16(p + 4) << 32
    flags = at(p + 6)
    layout = at(p + 7)
    q = p + HEADER_SIZE
    has_tag = (layout & L_TAG) != 0
    tl = u16_where(has_tag, q)
    q = q + has_tag * 2
    has_idem = (layout & L_IDEM) != 0
    il = u16_where(has_idem, q)
    q = q + has_idem * 2
    multi = (layout & L_MULTI) != 0
    width = np.asarray(WIDTH)[layout & L_WIDTHS]
    if multi.any():
        width = np.where(multi, 2 + 12 * u16(q), width)
    ok &= ~(multi & ((layout & L_WIDTHS) != 0)) & (multi | ((layout & 3) != 3))
    tag_start = q + width
    data_start = tag_start + tl + il
    ok &= data_start <= end
    rows = np.flatnonzero(verify & ok)
    rows = rows[~_runs_pass(b, s, n, plen, long, rows)]  # what is left is checked record by record
    if len(rows):
        crcs = np.fromiter(map(crc32, map(buf.__getitem__, map(slice, p[rows].tolist(), end[rows].tolist()))),
                           np.int64, len(rows))
        ok[rows] &= crcs == u32(p[rows] - CRC_SIZE)
    data_len = end - data_start
    if not ok.all():  # an invalid row's fields were read from wherever its bad lengths pointed
        for column in (ts, flags, tag_start, tl, data_start, data_len):
            column[~ok] = 0
    return ts, flags, tag_start, tl, data_start, data_len, ok


MIN_RUN = 32  # shorter runs are checked record by record


def _runs_pass(b: Any, s: Any, n: Any, plen: Any, long: Any, rows: Any) -> Any:
    """Which of ``rows`` (short records) pass their CRC check as part of a run: records of one payload
    length L lying back to back in ``b``. A run is checked with one CRC-32 call instead of one per
    record (the per-record calls are about a quarter of a page's CPU on the Arrow read path).

    Each record's payload is put before its own CRC (little-endian), and the run is read as one
    stream: a zlib CRC-32 over data followed by its CRC always ends on the same value (the CRC's
    residue), whatever the data, so over k valid records the stream's CRC depends on (L, k) only, and
    equals that of k records of zeros (_valid_run). A record whose CRC does not match changes the
    result whatever the others hold (CRC-32 is linear and its shift by the bytes that follow is
    invertible); several bad records cancel out with probability 2**-32, as within one CRC. A run
    that fails is checked record by record, which finds the bad ones."""
    import numpy as np

    passed = np.zeros(len(rows), bool)
    if len(rows) < MIN_RUN:
        return passed
    rs, rl = s[rows], plen[rows]
    # a run breaks where the next record does not start at this one's end, or has another length
    joined = (rs[1:] == rs[:-1] + n[rows[:-1]]) & (rl[1:] == rl[:-1]) & ~long[rows[1:]] & ~long[rows[:-1]]
    breaks = np.flatnonzero(~joined) + 1
    for first, stop in zip([0, *breaks.tolist()], [*breaks.tolist(), len(rows)], strict=True):
        k = stop - first
        if k < MIN_RUN or long[rows[first]]:
            continue
        size, length = int(n[rows[first]]), int(rl[first])
        records = np.lib.stride_tricks.as_strided(b[int(rs[first]):], shape=(k, size), strides=(size, 1))
        stream = np.empty((k, length + CRC_SIZE), np.uint8)
        stream[:, :length] = records[:, PAYLOAD : PAYLOAD + length]
        stream[:, length:] = records[:, 1:PAYLOAD]
        if crc32(stream) == _valid_run(length, k):
            passed[first:stop] = True
    return passed


@functools.lru_cache(maxsize=64)
def _valid_run(length: int, k: int) -> int:
    """The CRC-32 of k valid (payload, CRC) pairs of ``length`` bytes: that of k pairs of zeros."""
    zeros = bytes(length)
    return crc32((zeros + U32.pack(crc32(zeros))) * k)
