"""The compiled twin of record.py (app/storage/_recordc.c) against the Python reference: the same bytes,
columns and errors over random batches and damaged pages, and no crash on any input."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkmq.storage import MessageColumns, MessageTooLarge, UnknownQueue, _recordc, record_columns, record_encode
from chunkmq.storage.record_columns import columns, columns_python
from chunkmq.storage.record_encode import encode_batch, encode_compiled, encode_records
from chunkmq.storage.store_writes import _Offsets

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def compiled() -> Iterator[None]:
    """The codec's dispatch on the compiled twin, whatever CHUNKMQ_PURE_PYTHON says."""
    with pytest.MonkeyPatch.context() as mp:
        for module in (record_encode, record_columns):
            mp.setattr(module, "_recordc", _recordc)
        yield


# Queue ids of every width (1, 2 and 4 bytes), each starting a few offsets below a width boundary of
# the offset (2, 3, 4 and 8 bytes), so that a batch's offsets cross it; 9 is not a queue.
START = {1: 0, 255: 0xFFFF - 3, 256: 0xFFFFFF - 3, 65535: 0xFFFFFFFF - 3, 65536: 1 << 40, 0xFFFFFFFF: 7}
UNKNOWN = 9
LIMIT = 300  # max_message_bytes: data of 300 bytes is the largest allowed, 301 too large

_data = st.sampled_from([0, 1, 100, 234, 235, 246, 247, LIMIT, LIMIT + 1]).map(lambda n: b"d" * n) | \
    st.binary(max_size=LIMIT)
_field = st.sampled_from([b"", b"", b"", b"t", b"\x00" * 40]) | st.binary(max_size=8)
_queues = st.lists(st.sampled_from(list(START)), max_size=4).map(tuple) | \
    st.sampled_from([(1,), (256,), (65536,), (0xFFFFFFFF,), ()])
_record = st.tuples(_data, _queues, _field, _field, st.sampled_from([0, 0, 1, 255]))
_rare = st.sampled_from([  # once in a batch: the largest fields, over a limit, or in no queue
    (b"", (1,), b"t" * 0xFFFF, b"k" * 0xFFFF, 0), (b"", (1,) * 0xFFFF, b"", b"", 0),
    (b"d" * (LIMIT + 1), (1,), b"", b"", 0), (b"", (1,), b"t" * 0x10000, b"", 0),
    (b"", (1,), b"", b"k" * 0x10000, 0), (b"", (1,) * 0x10000, b"", b"", 0), (b"", (1,), b"", b"", 256),
    (b"", (1,), b"", b"", -1), (b"x", (UNKNOWN,), b"", b"", 0)])
_size = st.integers(0, 5000) | st.sampled_from([0, 1, 2, 10, 255, 256, 1000])


@st.composite
def batches(draw: st.DrawFn, size: st.SearchStrategy[int] = _size) -> MessageColumns:
    """Batches of 0-5,000 records, drawn from a few kinds of record so that large ones stay quick."""
    kinds = draw(st.lists(_record, min_size=1, max_size=8))
    n = draw(size)
    rng = random.Random(draw(st.integers(0, 2**32)))
    records = [kinds[rng.randrange(len(kinds))] for _ in range(n)]
    if n and draw(st.integers(0, 9)) == 0:
        records[rng.randrange(n)] = draw(_rare)
    data, queues, tags, keys, flags = (list(c) for c in zip(*records, strict=True)) if n else ([], [], [], [], [])
    optional = draw(st.booleans())  # columns nobody uses are None, as the publish path gives them
    return MessageColumns(data, queues, *(None if optional and not any(c) else c for c in (tags, keys, flags)))


def _outcome(encode: Callable[..., Any], batch: MessageColumns, timestamp: int, position: int) -> tuple:
    """What an encoder returns, or raises, and the next offsets it leaves (values and their order)."""
    offsets = _Offsets({q: SimpleNamespace(next=o) for q, o in START.items()})  # type: ignore[arg-type]
    try:
        buf, appended, entries = encode(batch, timestamp, position, offsets, LIMIT, {})
        got: tuple = (buf, appended, list(entries.items()))
    except (MessageTooLarge, UnknownQueue, ValueError) as exc:
        got = (type(exc), str(exc))
    return got, list(offsets.items())


def _compiled(batch: MessageColumns, timestamp: int, position: int, offsets: dict[int, int], limit: int,
              tags: dict[bytes, int]) -> Any:
    encoded = encode_compiled(batch, timestamp, position, offsets, limit)
    assert encoded is not None, "the compiled encoder left a batch of bytes and ints to Python"
    return encoded


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches(), timestamp=st.sampled_from([0, 1_700_000_000_123, (1 << 48) - 1]),
       position=st.sampled_from([0, 4096, 1 << 40]))
def test_the_compiled_encoder_writes_and_raises_what_encode_records_does(batch: MessageColumns, timestamp: int,
                                                                         position: int) -> None:
    """Bytes, placements, index entries (and their queues' order), next offsets, or the same error
    with the same next offsets left; over every width of queue id and offset, long frames, empty and
    largest tags, keys and data, 0 to 65,535 placements."""
    assert _outcome(_compiled, batch, timestamp, position) == _outcome(encode_records, batch, timestamp, position)


@pytest.mark.parametrize(("batch", "why"), [
    (MessageColumns([bytearray(b"a")], [(1,)]), "data other than bytes"),
    (MessageColumns([memoryview(b"a")], [(1,)], [b"t"]), "data other than bytes"),
    (MessageColumns([b"a"], [(1 << 32,)]), "a queue id beyond u32"),
    (MessageColumns([b"a"], [(-1,)]), "a negative queue id"),
    (MessageColumns([b"a"], [[1.0]]), "a queue id that is not an int"),
    (MessageColumns([b"a"], [{1}]), "placements in a set"),
    (MessageColumns([b"a", b"b"], [(1,)]), "columns of different lengths"),
    (MessageColumns([b"a"], [(1,)], ["t"]), "a tag that is a str"),
    (MessageColumns([b"a"], [(1,)], None, None, [1.5]), "flags that are not an int"),
])
def test_batches_of_other_types_are_left_to_encode_records(batch: MessageColumns, why: str) -> None:
    """Python raises (or encodes) them as before: the compiled encoder does nothing with them."""
    offsets = {1: 5}
    assert encode_compiled(batch, 0, 0, offsets, LIMIT) is None, why
    assert offsets == {1: 5}

    def outcome(encode: Callable[..., Any]) -> Any:
        try:
            return encode(batch, 0, 0, {1: 5}, LIMIT, {})
        except Exception as exc:
            return type(exc), str(exc)

    assert outcome(encode_batch) == outcome(encode_records)


@pytest.mark.parametrize(("timestamp", "position", "offset"), [(1 << 48, 0, 0), (-1, 0, 0), (0, -1, 0),
                                                                (0, 1 << 62, 0), (0, 0, -1), (0, 0, 2**64 - 1)])
def test_numbers_beyond_the_format_are_left_to_encode_records(timestamp: int, position: int, offset: int) -> None:
    batch = MessageColumns([b"a"], [(1,)])
    assert encode_compiled(batch, timestamp, position, {1: offset}, LIMIT) is None


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=600), value=st.integers(0, 2**32 - 1))
def test_crc32_is_zlibs(data: bytes, value: int) -> None:
    assert _recordc.crc32(data, value) == zlib.crc32(data, value)
    assert _recordc.crc32(data) == zlib.crc32(data)


def test_crc32_is_zlibs_at_every_length_around_the_folding_steps() -> None:
    """Below 64 bytes a table does it all; from 64 on, 16-byte blocks are folded and the rest tabled."""
    rng = random.Random(5)
    for n in range(1100):
        data = rng.randbytes(n)
        assert _recordc.crc32(data, n * 7919) == zlib.crc32(data, n * 7919), n


# ------------------------------------------------------------------------------------------- reads
def _page(batch: MessageColumns) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A batch's records as a read finds them: the buffer, each record's start and length."""
    offsets = {q: 0 for q in START}
    try:
        buf, appended, _ = encode_records(batch, 1_700_000_000_123, 0, offsets, LIMIT, {})
    except (MessageTooLarge, KeyError, ValueError):
        return b"", np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.array(appended.positions, np.int64)
    return buf, starts, np.diff(np.append(starts, len(buf)))


def _same_columns(buf: bytes, starts: np.ndarray, lengths: np.ndarray, verify: Any) -> np.ndarray:
    python = columns_python(buf, starts, lengths, verify)
    compiled = columns(buf, starts, lengths, verify)
    assert [c.dtype for c in compiled] == [c.dtype for c in python]
    for name, a, b in zip(("timestamps", "flags", "tag_start", "tag_len", "data_start", "data_len", "ok"),
                          compiled, python, strict=True):
        assert np.array_equal(a, b), name
    return python[-1]


_rows = st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([0, 0, 0, 1, -1, 5, -14, 2**40, -(2**63)]),
                           st.sampled_from([0, 0, 0, 1, -1, 4, -6, 2**62, 2**63 - 1]), st.booleans()),
                 max_size=60)
_damage = st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 255)), max_size=4)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches(st.integers(0, 2000)), rows=_rows, damage=_damage, cut=st.integers(0, 64) | st.just(0),
       whole=st.booleans())
def test_the_compiled_column_read_gives_what_columns_python_gives(batch: MessageColumns, rows: list[tuple],
                                                                  damage: list[tuple[int, int]], cut: int,
                                                                  whole: bool) -> None:
    """The same columns and the same verdict per row: for whole pages, for rows picked, repeated and
    moved off their records, for bytes flipped and pages cut short, with the CRC checked or not."""
    buf, starts, lengths = _page(batch)
    if whole or not len(starts):
        verify: Any = np.ones(len(starts), bool)
        assert _same_columns(buf, starts, lengths, verify).all()
    if len(starts):
        def wrap(x: int) -> int:  # as int64 arithmetic would
            return (x + 2**63) % 2**64 - 2**63

        picked = [(wrap(int(starts[i % len(starts)]) + ds), wrap(int(lengths[i % len(starts)]) + dl), v)
                  for i, ds, dl, v in rows]
        starts, lengths = (np.array([r[k] for r in picked], np.int64) for k in (0, 1))
        verify = np.array([r[2] for r in picked], bool)
    bad = bytearray(buf)
    for at, bits in damage:
        if bad:
            bad[at % len(bad)] ^= bits
    _same_columns(bytes(bad[: len(bad) - cut]), starts, lengths, verify)


# -------------------------------------------------------------------------------------------- fuzz
@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=3000), rows=st.lists(st.tuples(
    st.integers(-5, 3005) | st.integers(-(2**63), 2**63 - 1), st.integers(-5, 600) | st.integers(-(2**63), 2**63 - 1),
    st.booleans()), max_size=50))
def test_random_bytes_read_as_columns_are_rows_not_valid_never_a_crash(buf: bytes, rows: list[tuple]) -> None:
    starts, lengths, verify = (np.array([r[k] for r in rows], t) for k, t in ((0, np.int64), (1, np.int64), (2, bool)))
    _same_columns(buf, starts, lengths, verify)


def test_every_cut_of_a_page_reads_as_columns_python_reads_it() -> None:
    records = [(b"x" * n, (q,), tag, b"", 0) for n, q, tag in [(10, 1, b""), (300, 256, b"t"), (0, 65536, b""),
                                                                 (120, 1, b"tag"), (250, 0xFFFFFFFF, b"")]]
    data, queues, tags, keys, flags = (list(c) for c in zip(*records, strict=True))
    buf, starts, lengths = _page(MessageColumns(data, queues, tags, keys, flags))
    assert _same_columns(buf, starts, lengths, True).all()
    for cut in range(len(buf)):
        _same_columns(buf[:cut], starts, lengths, True)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400) | st.sampled_from([b"y" * 70_000]),
       queue_id=st.sampled_from([0, 255, 256, 65535, 65536, 2**32 - 1]) | st.integers(0, 2**32 - 1),
       timestamp=st.sampled_from([0, 1_700_000_000_123, (1 << 48) - 1]),
       position=st.sampled_from([0, 4096, (1 << 62) - 1]) | st.integers(0, 1 << 40),
       offset=st.sampled_from([0, 65535, 65536, 2**24, 2**32, 2**63]) | st.integers(0, 2**40),
       max_bytes=st.sampled_from([0, 100, 1 << 20]), flags=st.sampled_from([0, 1, 255]) | st.integers(0, 255))
def test_the_compiled_single_record_encoder_writes_what_encode_records_does(
        data: bytes, queue_id: int, timestamp: int, position: int, offset: int, max_bytes: int, flags: int) -> None:
    """encode_one (one record with no tag or key, one placement, its flags) gives encode_records' bytes,
    entry and byte count, or None where encode_records refuses the record (too large), which record.py
    then raises for."""
    got = _recordc.encode_one(data, queue_id, timestamp, position, offset, max_bytes, flags)
    try:
        buf, _, entries = encode_records(MessageColumns([data], [(queue_id,)], flags=[flags]), timestamp, position,
                                         {queue_id: offset}, max_bytes, {})
    except MessageTooLarge:
        assert got is None
        return
    assert got == (buf, *entries[queue_id])


@settings(max_examples=200, deadline=None)
@given(args=st.lists(st.sampled_from([None, True, 0, 1, -1, 2**32, 2**48, 2**62, 2**64, -(2**70), b"", b"ab", "x",
                                      256, 1.5, bytearray(b"a")]), min_size=7, max_size=7))
def test_the_single_record_encoder_given_anything_answers_or_raises_never_crashes(args: list[Any]) -> None:
    try:
        got = _recordc.encode_one(*args)
    except Exception:
        return
    assert got is None or (type(got) is tuple and len(got) == 3)


_scalar = st.sampled_from([None, True, 0, 1, -1, 2**32, 2**64, -(2**70), b"", b"ab", "x", 1.5, bytearray(b"a")])
_anything = _scalar | st.lists(_scalar, max_size=3) | st.lists(_scalar, max_size=3).map(tuple)


@settings(max_examples=200, deadline=None)
@given(args=st.lists(_anything, min_size=9, max_size=9), data=st.lists(_anything, max_size=4),
       queues=st.lists(_anything, max_size=4), offsets=st.dictionaries(st.integers(0, 3), _anything))
def test_the_encoder_given_anything_answers_or_raises_never_crashes(args: list[Any], data: list[Any],
                                                                    queues: list[Any], offsets: dict[int, Any]) -> None:
    """Whatever the arguments: a result, None or an exception (what record.py makes of them is the
    test above); here every argument is drawn, or the batch's columns, queue ids and offsets are."""
    for call in (args, [data, queues, *args[2:7], offsets, args[8]],
                 [data, queues, None, None, None, 0, 0, offsets, 1000]):
        try:
            _recordc.encode(*call)
        except Exception:
            pass


def test_columns_rejects_buffers_of_the_wrong_size_or_kind() -> None:
    n = 3
    good = [b"\x00" * 64, np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool),
            np.zeros((6, n), np.int64), np.zeros(n, bool)]
    assert _recordc.columns(*good) is None
    for i, wrong in [(1, np.zeros(n + 1, np.int64)), (2, np.zeros(n, np.int32)), (3, np.zeros(n + 1, bool)),
                     (4, np.zeros((5, n), np.int64)), (5, np.zeros(n - 1, bool))]:
        with pytest.raises(ValueError, match="8 bytes a row"):
            _recordc.columns(*good[:i], wrong, *good[i + 1:])
    with pytest.raises(TypeError):
        _recordc.columns("text", *good[1:])
    with pytest.raises((TypeError, BufferError)):
        _recordc.columns(*good[:4], b"\x00" * 48 * n, good[5])  # read-only
    with pytest.raises(TypeError):
        _recordc.columns(*good[:5])
    with pytest.raises(TypeError):
        _recordc.encode(1, 2, 3)


def test_the_format_tests_pass_under_pythonmalloc_debug() -> None:
    """This file and test_record.py again, under CPython's debug allocator: it catches a write past an
    allocated block, a double free and use of freed memory at once, where the normal run might not."""
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONFAULTHANDLER": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                          "tests/storage/test_recordc.py", "tests/storage/test_record.py",
                          "-k", "not pythonmalloc_debug"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
