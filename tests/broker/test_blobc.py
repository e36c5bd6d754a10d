"""The compiled twins of blob.py's `parse` and `text_blobs` (app/broker/_blobc.c) against their
Python reference: the same columns, odd rows included, over random pages and damaged ones, the same
blobs of text batches, and no crash on any input."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkmq.broker import _blobc, blob
from chunkmq.broker.blob import FORMAT1, encode_blob

ROOT = Path(__file__).resolve().parents[2]
# Under the debug allocator (the last test) a tenth of the examples: its checks are what that run is for.
SCALE = 0.1 if os.environ.get("PYTHONMALLOC") == "debug" else 1


def examples(n: int) -> int:
    return max(5, int(n * SCALE))

FIELDS = ("head", "exchange", "routing_key", "headers", "body", "binary", "odd")


def _columns(compiled: bool, buf: np.ndarray, start: Any, length: Any) -> Any:
    """blob.parse's columns (each member's start and length apart), or the error it raises."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blob, "_blobc", _blobc if compiled else None)
        try:
            page = blob.parse(buf, start, length)
        except Exception as exc:
            return type(exc), str(exc)
    out = []
    for name in FIELDS:
        value = getattr(page, name)
        out += list(value) if isinstance(value, tuple) else [value]
    return out


def same(buf: np.ndarray, start: Any, length: Any) -> Any:
    python, compiled = _columns(False, buf, start, length), _columns(True, buf, start, length)
    if isinstance(python, tuple):
        assert compiled == python
        return python
    assert len(compiled) == len(python)
    for i, (a, b) in enumerate(zip(compiled, python, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), i
    return python


# Members of every length form: absent, empty, one length byte (up to 254), LONG then u16 (255 up
# to the largest, 65535); bodies text or binary; the older JSON-members form; empty data.
_member = st.sampled_from([b"", b"k", b"k" * 254, b"k" * 255, b"\\" * 300]) | st.binary(max_size=12)
_blob = st.builds(encode_blob, _member, _member, st.none() | st.sampled_from([b"{}", b'{"k":"v"}', b"h" * 300]),
                  st.binary(max_size=120) | st.just(b"x" * 100), st.booleans()) | \
    st.sampled_from([b"", bytes([FORMAT1]) + b'exchange":"","body":"x"', b"\x80", b"\x81", b"\x81\xff", b"\x83\x05ab"])


@st.composite
def pages(draw: st.DrawFn) -> tuple[bytes, np.ndarray, np.ndarray]:
    """0-5,000 blobs from a few kinds, with gaps between them (records' framing) or back to back."""
    kinds = draw(st.lists(_blob, min_size=1, max_size=6))
    n = draw(st.integers(0, 300) | st.sampled_from([0, 1, 1000, 5000]) | st.integers(0, 5000))
    rng = random.Random(draw(st.integers(0, 2**32)))
    gap = draw(st.sampled_from([0, 0, 5, 13]))
    blobs = [kinds[rng.randrange(len(kinds))] for _ in range(n)]
    if n and draw(st.integers(0, 4)) == 0:  # once in a page: every member at its largest
        blobs[rng.randrange(n)] = encode_blob(b"e" * 0xFFFF, b"k" * 0xFFFF, b"h" * 0xFFFF, b"b" * 300, True)
    lengths = np.array([len(b) for b in blobs], np.int64)
    starts = np.arange(1, n + 1, dtype=np.int64) * gap + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return b"".join(bytes(gap) + b for b in blobs), starts, lengths


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(page=pages(), damage=st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 255)), max_size=4),
       cut=st.sampled_from([0, 0, 0, 1, 2, 3]) | st.integers(0, 400))
def test_the_twin_parses_what_numpy_parses(page: tuple[bytes, np.ndarray, np.ndarray],
                                           damage: list[tuple[int, int]], cut: int) -> None:
    """The same columns for whole pages, for pages with bytes flipped (heads, length bytes) and for
    pages cut short (the probes clamped into the buffer)."""
    raw, starts, lengths = page
    buf = np.frombuffer(raw, np.uint8)
    odd = same(buf, starts, lengths)[-1]
    assert _blobc.parse(buf, starts, lengths, np.empty(9 * len(starts), np.int64), np.empty(2 * len(starts), bool))
    bad = bytearray(raw)
    for at, bits in damage:
        if bad:
            bad[at % len(bad)] ^= bits
    same(np.frombuffer(bytes(bad[: len(bad) - cut]), np.uint8), starts, lengths)
    if len(odd):
        same(buf, starts[::-1].copy(), lengths[::-1])  # rows in any order, strided lengths


@settings(max_examples=examples(200), deadline=None)
@given(raw=st.binary(max_size=800), rows=st.lists(st.tuples(
    st.integers(-3, 803) | st.integers(-(2**63), 2**63 - 1), st.integers(-3, 300) | st.integers(-(2**63), 2**63 - 1)),
    max_size=40))
def test_random_bytes_and_rows_parse_as_numpy_parses_them_never_a_crash(raw: bytes,
                                                                        rows: list[tuple[int, int]]) -> None:
    """Random buffers at random (start, length) rows, negative and past the end included; rows numpy
    would read from the buffer's end (negative starts) or whose sums would wrap are left to numpy."""
    starts = np.array([r[0] for r in rows], np.int64)
    lengths = np.array([r[1] for r in rows], np.int64)
    same(np.frombuffer(raw, np.uint8), starts, lengths)


def test_arrays_of_other_types_or_shapes_are_left_to_numpy() -> None:
    buf, n = np.zeros(64, np.uint8), 3
    good = [buf, np.zeros(n, np.int64), np.ones(n, np.int64), np.empty(9 * n, np.int64), np.empty(2 * n, bool)]
    assert _blobc.parse(*good) is True
    for i, wrong in [(0, np.zeros(8, np.int64)), (0, buf[::2]), (1, np.zeros(n, np.int32)),
                     (2, np.zeros(n + 1, np.int64)), (1, np.zeros((n, 1), np.int64)), (3, np.empty(8 * n, np.int64)),
                     (4, np.empty(2 * n, np.uint8)), (3, np.empty(9 * n, np.int64)[::-1]), (1, [0, 0, 0]),
                     (3, b"\x00" * 72 * n)]:
        assert _blobc.parse(*good[:i], wrong, *good[i + 1:]) is None, i
    with pytest.raises(TypeError):
        _blobc.parse(*good[:4])
    same(buf, np.zeros(n, np.int32), np.ones(n, np.int32))  # numpy's own dtypes
    same(buf, np.array([-1, 0, 1]), np.ones(n, np.int64))  # a negative start reads from the end, as numpy does


def _text_blobs(compiled: bool, *args: Any) -> Any:
    """What blob.text_blobs returns or raises, on the twin or on Python."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blob, "_blobc", _blobc if compiled else None)
        try:
            return blob.text_blobs(*args)
        except Exception as exc:
            return type(exc), str(exc)


# bodies JSON writes as they are, and (rarely in a batch) one that it escapes or that is not ASCII
_plain = st.sampled_from([b"", b"x" * 100, b"a b~\x7f",
                          bytes(range(0x20, 0x80)).replace(b'"', b"").replace(b"\\", b"")])
_escaped = st.sampled_from([b'"', b"\\", b"\x00", b"\x1f", b"\x80", b"\xc3\xa9", b"a\nb"])


@settings(max_examples=examples(80), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kinds=st.lists(_plain | st.binary(max_size=30), min_size=1, max_size=5), n=st.integers(0, 300) | st.just(1000),
       odd=st.none() | _escaped, seed=st.integers(0, 2**32), head=st.sampled_from([b"", b"\x80", b"\x82\x02qw"]),
       before=st.binary(max_size=20), after=st.sampled_from([b"", b"tail"]))
def test_text_blobs_are_what_python_builds(kinds: list[bytes], n: int, odd: bytes | None, seed: int, head: bytes,
                                           before: bytes, after: bytes) -> None:
    rng = random.Random(seed)
    bodies = [kinds[rng.randrange(len(kinds))] for _ in range(n)]
    if odd is not None and n:
        bodies[rng.randrange(n)] = odd
    args = (head, before + b"".join(bodies) + after, len(before), [len(b) for b in bodies])
    python = _text_blobs(False, *args)
    assert _text_blobs(True, *args) == python
    plain = all(b.isascii() and not any(c < 0x20 or c in b'"\\' for c in b) for b in bodies)
    assert python == ([head + b for b in bodies] if plain else None)


@settings(max_examples=examples(200), deadline=None)
@given(head=st.binary(max_size=5), buffer=st.binary(max_size=60), start=st.integers(-3, 63) | st.just(2**70),
       lengths=st.lists(st.integers(-2, 30) | st.sampled_from([2**63, 2**70]), max_size=8))
def test_text_blobs_of_any_cut_are_what_python_builds_never_a_crash(head: bytes, buffer: bytes, start: int,
                                                                       lengths: list[int]) -> None:
    """Starts and lengths past the buffer, negative or beyond 64 bits are left to Python."""
    assert _text_blobs(True, head, buffer, start, lengths) == _text_blobs(False, head, buffer, start, lengths)
    for wrong in [(bytearray(head), buffer, 0, [0]), (head, memoryview(buffer), 0, [0]), (head, buffer, 0.0, [0]),
                  (head, buffer, 0, (0,)), (head, buffer, 0, [True])]:
        assert _blobc.text_blobs(*wrong) is None
    with pytest.raises(TypeError):
        _blobc.text_blobs(head, buffer, start)


def test_the_format_tests_pass_under_pythonmalloc_debug() -> None:
    """This file and test_blob.py again, under CPython's debug allocator: it catches a write past an
    allocated block, a double free and use of freed memory at once, where the normal run might not."""
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONFAULTHANDLER": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                          "tests/broker/test_blobc.py", "tests/broker/test_blob.py", "-k", "not pythonmalloc_debug"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
