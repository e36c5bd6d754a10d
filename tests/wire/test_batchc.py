"""The compiled twin of batch.py (app/wire/_batchc.c) against the Python reference: the same bytes,
the same columns and the same errors over random batches and damaged ones, and no crash on any input."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkmq.wire import _batchc
from chunkmq.wire import batch as wire

ROOT = Path(__file__).resolve().parents[2]
# Under the debug allocator (the last test) a tenth of the examples: its checks are what that run is for.
SCALE = 0.1 if os.environ.get("PYTHONMALLOC") == "debug" else 1


def examples(n: int) -> int:
    return max(5, int(n * SCALE))

FAST = settings(max_examples=examples(40), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _outcome(compiled: bool, name: str, *args: Any) -> Any:
    """What batch.py's function `name` returns or raises (type and message), on the twin or on Python."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wire, "_batchc", _batchc if compiled else None)
        try:
            got = getattr(wire, name)(*args)
        except Exception as exc:
            return type(exc), str(exc)
    return list(got) if name == "slices" else got


def same(name: str, *args: Any) -> Any:
    """Asserts that the twin's path and Python's give the same, and returns it."""
    python = _outcome(False, name, *args)
    assert _outcome(True, name, *args) == python
    return python


def _damaged(data: bytes, damage: list[tuple[int, int]], cut: int, extra: bytes) -> bytes:
    out = bytearray(data)
    for at, bits in damage:
        if out:
            out[at % len(out)] ^= bits
    return bytes(out[: max(0, len(out) - cut)]) + extra


_damage = st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3)
_cut = st.sampled_from([0, 0, 0, 1, 3, 4, 9]) | st.integers(0, 100)
_extra = st.sampled_from([b"", b"", b"", b"\x00", b"xyz"])
_size = st.integers(0, 300) | st.sampled_from([0, 1, 2, 100, 1000, 5000]) | st.integers(0, 5000)


def _column(draw: st.DrawFn, n: int, values: st.SearchStrategy[int]) -> list[int]:
    """n values drawn from a few kinds (large columns stay quick to draw)."""
    kinds = draw(st.lists(values, min_size=1, max_size=6))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return [kinds[rng.randrange(len(kinds))] for _ in range(n)]


def _width(bits: int) -> st.SearchStrategy[int]:
    """Values of a column of this many bits: small, at its edges, and (rarely) just past them."""
    top = (1 << bits) - 1
    inside = st.sampled_from([0, 1, 100, top - 1, top]) | st.integers(0, top)
    return st.integers(0, 19).flatmap(lambda k: st.sampled_from([top + 1, -1]) if k == 0 else inside)


# ------------------------------------------------------------------------------------------ publish
_body = st.sampled_from([b"", b"x" * 100, b"\x00\xff" * 150]) | st.binary(max_size=300)
_key = st.sampled_from([b"", b"", b"key", b"k" * 255]) | st.binary(max_size=20)
_rare = st.sampled_from([  # once in a batch: the largest fields, or past a column
    (b"b" * 70_000, b"k" * 0xFFFF, 1), (b"", b"k" * 0x10000, 0), (b"x", b"", 2), (b"x", b"", 255), (b"x", b"", 256),
    (b"x", b"", -1)])


@st.composite
def publishes(draw: st.DrawFn) -> tuple[list[bytes], list[bytes], Any]:
    n = draw(_size)
    kinds = draw(st.lists(st.tuples(_body, _key, st.sampled_from([0, 1])), min_size=1, max_size=6))
    rng = random.Random(draw(st.integers(0, 2**32)))
    rows = [kinds[rng.randrange(len(kinds))] for _ in range(n)]
    if rows and draw(st.integers(0, 4)) == 0:
        rows[rng.randrange(n)] = draw(_rare)
    bodies, keys, flags = ([r[i] for r in rows] for i in range(3))
    form = draw(st.sampled_from(["list", "tuple", "bytes", "numpy"]))
    if form == "tuple":
        bodies, keys, flags = tuple(bodies), tuple(keys), tuple(flags)
    elif form == "bytes" and all(0 <= f < 256 for f in flags):
        flags = bytes(flags)
    elif form == "numpy":
        flags = np.array(flags, np.int64)
    return bodies, keys, flags


@FAST
@given(batch=publishes(), max_records=st.sampled_from([5000, 1000, 1, 0]), damage=_damage, cut=_cut, extra=_extra)
def test_publish_batches_encode_and_decode_as_in_python(batch: tuple, max_records: int,
                                                       damage: list[tuple[int, int]], cut: int, extra: bytes) -> None:
    """The same body (or error) from encode_publish, the same columns (or error) from decode_publish,
    whole and damaged, and the same slices of its keys and bodies."""
    bodies, keys, flags = batch
    body = same("encode_publish", bodies, keys, flags)
    if not isinstance(body, bytes):
        return
    if bodies and max(map(len, keys)) <= 0xFFFF and all(0 <= f < 256 for f in flags):
        assert _batchc.encode_publish(bodies, keys, flags) == body  # the twin itself wrote it
    columns = same("decode_publish", body, max_records)
    if isinstance(columns, wire.PublishColumns):
        assert _batchc.decode_publish(body, max_records) is not None
        assert same("slices", body, columns.keys_start, columns.key_lengths) == list(keys)
        assert same("slices", body, columns.bodies_start, columns.body_lengths) == list(bodies)
    same("decode_publish", _damaged(body, damage, cut, extra), max_records)


@FAST
@given(n=_size, key=_key, body=st.sampled_from([b"", b"x" * 100, b"\xc3\xa9" * 20]),
       exact=st.booleans(), seed=st.integers(0, 2**32))
def test_text_publish_batches_encode_as_in_python(n: int, key: bytes, body: bytes, exact: bool, seed: int) -> None:
    rng = random.Random(seed)
    sizes = [len(body)] * n if exact else [rng.randrange(0, 300) for _ in range(n)]
    out = same("encode_publish_text", sizes, key, body * n)
    if n and len(key) <= 0xFFFF:
        assert _batchc.encode_publish_text(sizes, key, body * n) == out


@FAST
@given(data=st.binary(max_size=400), start=st.integers(-5, 405), lengths=st.lists(
    st.integers(0, 40) | st.sampled_from([-1, 0, 400, 2**70]), max_size=30), equal=st.booleans())
def test_slices_cut_what_python_cuts(data: bytes, start: int, lengths: list[int], equal: bool) -> None:
    if equal and lengths:
        lengths = [lengths[0]] * len(lengths)
    same("slices", data, start, lengths)


# ------------------------------------------------------------------------------------------ results
@st.composite
def results(draw: st.DrawFn) -> tuple:
    n = draw(_size)
    ids = _column(draw, n, _width(64))
    counts = draw(st.none() | st.just(_column(draw, n, _width(16))))
    p = draw(st.integers(0, 3 * n + 3) | st.just(n))
    offsets = _column(draw, p, _width(64))
    names = _column(draw, p, st.sampled_from([0, 1, 5, 255]))
    name_lengths = bytes(names)
    region = b"".join(b"q" * k for k in names)
    form = draw(st.sampled_from(["list", "tuple", "numpy"]))
    if form == "tuple":
        ids, offsets = tuple(ids), tuple(offsets)
    elif form == "numpy" and all(0 <= v < 2**64 for v in ids + offsets):
        ids, offsets = np.array(ids, np.uint64), np.array(offsets, np.uint64)
    return ids, counts, offsets, name_lengths, region


@FAST
@given(args=results(), damage=_damage, cut=_cut, extra=_extra)
def test_results_encode_and_decode_as_in_python(args: tuple, damage: list[tuple[int, int]], cut: int,
                                                extra: bytes) -> None:
    out = same("encode_results", *args)
    if not isinstance(out, bytes):
        return
    decoded = same("decode_results", out)
    assert isinstance(decoded, wire.Results) and _batchc.decode_results(out) is not None
    same("decode_results", _damaged(out, damage, cut, extra))


@FAST
@given(n=_size, name=st.sampled_from([b'"q"', b'"a%d%s%%"', b'"' + b"n" * 255 + b'"', b""]), data=st.data())
def test_json_results_are_what_python_formats(n: int, name: bytes, data: st.DataObject) -> None:
    ids, offsets = _column(data.draw, n, _width(64)), _column(data.draw, n, _width(64))
    if data.draw(st.booleans()) and n:  # a column of another length
        offsets = offsets[:-1]
    out = same("results_json", name, ids, offsets)
    if all(0 <= v < 2**64 for v in ids + offsets) and len(ids) == len(offsets):
        assert _batchc.results_json(name, ids, offsets) is not None  # the twin's own work
        assert isinstance(out, bytes)
        if name == b'"q"':
            assert orjson.loads(out) == [{"id": f"{i:016x}", "routed": [{"queue": "q", "offset": o}],
                                          "duplicate": False}
                                         for i, o in zip(ids, offsets, strict=True)]


# ---------------------------------------------------------------------------------------- delivered
_dtypes = [np.int64, np.uint64, np.int32, np.uint32, np.uint16, np.uint8, np.int8, bool]


@st.composite
def delivered(draw: st.DrawFn) -> tuple[int, list[Any], list[bytes]]:
    """Columns as the server gives them (lists, tuples, numpy arrays of any integer type, broadcast
    ones, bytes already encoded) with values of every width and regions to match their lengths."""
    n = draw(_size)
    columns: list[Any] = []
    sums = []
    for i, code in enumerate(wire.DELIVERED_COLUMNS):
        bits = 8 * wire.struct.calcsize("<" + code)
        values = _column(draw, n, _width(bits) if i < 5 else st.sampled_from([0, 0, 1, 7, 100, 255, 256, -1]))
        if i >= 5:  # a region's lengths: small, and what the region holds
            sums.append(sum(v for v in values if v > 0))
        form = draw(st.sampled_from(["list", "list", "tuple", "numpy", "broadcast", "bytes"]))
        if form == "tuple":
            values = tuple(values)
        elif form == "numpy":
            dtype = draw(st.sampled_from(_dtypes))
            values = np.array([v % (1 << 31) for v in values], np.int64).astype(dtype)  # wrapped, as C casts
        elif form == "broadcast" and values:
            values = np.broadcast_to(np.int64(values[0] % (1 << 62)), (n,))
        elif form == "bytes" and all(0 <= v < 1 << bits for v in values):
            values = wire.column_bytes(code, values) + draw(st.sampled_from([b"", b"", b"\x01"]))
        columns.append(values)
    regions = [b"r" * (total if draw(st.integers(0, 9)) else draw(st.integers(0, 2000))) for total in sums]
    return n, columns, regions


@settings(FAST, max_examples=examples(25))
@given(args=delivered(), damage=_damage, cut=_cut, extra=_extra)
def test_delivered_batches_encode_and_decode_as_in_python(args: tuple, damage: list[tuple[int, int]], cut: int,
                                                          extra: bytes) -> None:
    out = same("encode_delivered", *args)
    if not isinstance(out, bytes):
        return
    same("decode_delivered", out)
    same("decode_delivered", _damaged(out, damage, cut, extra))


def test_a_well_formed_delivered_batch_is_the_twins_own_work() -> None:
    n = 1000
    columns = [list(range(70_000, 70_000 + n)), np.arange(n, dtype=np.int64) * 117, [1_700_000_000_000] * n,
               np.broadcast_to(1, (n,)), np.zeros(n, bool), [0] * n, [3] * n, [0] * n, [0] * n, [100] * n]
    regions = [b"", b"key" * n, b"", b"", b"x" * 100 * n]
    out = _batchc.encode_delivered(n, columns, regions)
    assert out is not None and out == same("encode_delivered", n, columns, regions)
    got = _batchc.decode_delivered(out)
    assert got is not None and wire.Delivered(*got) == same("decode_delivered", out)
    assert wire.Delivered(*got).routing_keys == [b"key"] * n and wire.Delivered(*got).exchanges is None


# -------------------------------------------------------------------------------------------- fuzz
@settings(max_examples=examples(150), deadline=None)
@given(data=st.binary(max_size=600), head=st.integers(0, 60) | st.integers(0, 2**32 - 1))
def test_random_bytes_decode_as_in_python_never_a_crash(data: bytes, head: int) -> None:
    """Random bytes, and random bytes behind a plausible count, to every decoder."""
    for body in (data, head.to_bytes(4, "little") + data):
        same("decode_publish", body, 1000)
        same("decode_results", body)
        same("decode_delivered", body)
        same("slices", body, head % 700, list(data[:20]))


_scalar = st.sampled_from([None, True, 0, 1, -1, 2**32, 2**64, -(2**70), b"", b"ab", "x", 1.5, bytearray(b"a"),
                           memoryview(b"abcd"), np.zeros(2, np.int64), np.zeros((2, 2), np.int64),
                           np.zeros(3, np.float64), np.zeros(2, ">u8")])
_anything = _scalar | st.lists(_scalar, max_size=10) | st.lists(_scalar, max_size=10).map(tuple)


@settings(max_examples=examples(100), deadline=None)
@given(args=st.lists(_anything, min_size=5, max_size=5))
def test_the_twin_given_anything_answers_or_raises_never_crashes(args: list[Any]) -> None:
    functions: list[tuple[Callable[..., Any], int]] = [
        (_batchc.encode_publish, 3), (_batchc.encode_publish_text, 3), (_batchc.decode_publish, 2),
        (_batchc.slices, 3), (_batchc.encode_results, 5), (_batchc.decode_results, 1),
        (_batchc.encode_delivered, 3), (_batchc.decode_delivered, 1), (_batchc.results_json, 3)]
    for fn, arity in functions:  # whatever the arguments: an answer or None, never an exception
        fn(*args[:arity])
        with pytest.raises(TypeError):
            fn(*args[:arity - 1] if arity > 1 else args[:2])
    _batchc.encode_delivered(3, [args[i % 5] for i in range(10)], [b""] * 5)


def test_the_format_tests_pass_under_pythonmalloc_debug() -> None:
    """The wire tests again, under CPython's debug allocator: it catches a write past an allocated
    block, a double free and use of freed memory at once, where the normal run might not."""
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONFAULTHANDLER": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tests/wire",
                          "-k", "not pythonmalloc_debug"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
