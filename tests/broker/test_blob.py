"""The stored blob (app/broker/blob.py): one blob written and read back, and a page of them parsed
with numpy giving what blob_fields gives for each."""

from __future__ import annotations

import random

import numpy as np
import pytest

from chunkmq.broker.blob import FORMAT1, blob_fields, encode_blob, parse


@pytest.mark.parametrize("size", [0, 254, 255, 65_000])
def test_blob_fields_round_trip(size: int) -> None:
    exchange, key, headers = b"e" * size, b"k" * min(size, 300), b'{"h":"%b"}' % (b"v" * size)
    blob = encode_blob(exchange, key, headers, b"body", False)
    assert blob_fields(blob) == (exchange, key, headers, b"body", False)
    assert blob_fields(encode_blob(b"", b"", None, b"\x00\xff", True)) == (b"", b"", None, b"\x00\xff", True)


def _random_blob(rng: random.Random) -> bytes:
    def text(longest: int) -> bytes:
        return bytes(rng.choice(b"abc\\") for _ in range(rng.choice([0, 1, 9, 254, 255, longest])))

    headers = rng.choice([None, b"{}", b'{"k":"%b"}' % text(300)])
    return encode_blob(text(300), text(260), headers, text(40), rng.random() < 0.3)


@pytest.mark.parametrize("seed", range(5))
def test_parse_reads_each_blob_as_blob_fields_does(seed: int) -> None:
    rng = random.Random(seed)
    blobs = [_random_blob(rng) for _ in range(200)]
    gaps = [bytes(rng.randrange(4)) for _ in blobs]  # blobs need not be back to back
    buf = b"".join(g + b for g, b in zip(gaps, blobs, strict=True))
    lengths = np.array([len(b) for b in blobs], np.int64)
    starts = np.cumsum([len(g) for g in gaps]) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    page = parse(np.frombuffer(buf, np.uint8), starts, lengths)
    assert not page.odd.any()

    def cut(member: tuple[np.ndarray, np.ndarray], i: int) -> bytes:
        return buf[int(member[0][i]):int(member[0][i] + member[1][i])]

    for i, blob in enumerate(blobs):
        exchange, key, headers, body, binary = blob_fields(blob)
        assert (cut(page.exchange, i), cut(page.routing_key, i), cut(page.body, i)) == (exchange, key, body)
        assert cut(page.headers, i) == (headers or b"") and page.binary[i] == binary


def test_parse_marks_what_it_cannot_read() -> None:
    good = encode_blob(b"", b"key", None, b"body", False)
    old = bytes([FORMAT1]) + b'exchange":"","routing_key":"k","body":"x"'
    short = good[:3]  # the head says a 3-byte key follows
    blobs = [good, old, b"", short, good]
    buf = b"".join(blobs)
    lengths = np.array([len(b) for b in blobs], np.int64)
    page = parse(np.frombuffer(buf, np.uint8), np.cumsum(lengths) - lengths, lengths)
    assert page.odd.tolist() == [False, True, True, True, False]
    empty = parse(np.frombuffer(b"", np.uint8), np.zeros(1, np.int64), np.zeros(1, np.int64))
    assert empty.odd.tolist() == [True]
