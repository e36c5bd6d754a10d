"""Routing rules without a server: topic matching, headers matching, the hash spread."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chunkmq.broker.routing import headers_match, stable_hash, topic_matches


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("a.b", "a.b", True), ("a.b", "a.c", False), ("a.*", "a.b", True), ("a.*", "a", False),
        ("a.*", "a.b.c", False), ("a.#", "a", True), ("a.#", "a.b.c", True), ("#", "", True),
        ("#", "x.y", True), ("#.z", "z", True), ("#.z", "x.y.z", True), ("#.z", "x.y", False),
        ("a.#.z", "a.z", True), ("a.#.z", "a.b.c.z", True), ("a.#.z", "a.b.c", False),
        ("*.*", "a.b", True), ("*.*", "a", False), ("#.#", "a", True), ("a.*.#", "a", False),
        ("a.*.#", "a.b", True), ("*", "", True), ("a..b", "a..b", True),
    ],
)
def test_topic_matches(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_headers_match() -> None:
    args = {"x-match": "all", "a": "1", "b": "2"}
    assert headers_match(args, {"a": "1", "b": "2", "c": "3"})
    assert not headers_match(args, {"a": "1"})
    assert headers_match({**args, "x-match": "any"}, {"a": "1"})
    assert not headers_match({**args, "x-match": "any"}, {"a": "2"})


def test_stable_hash_is_the_same_in_every_process() -> None:
    """Python's hash() is salted per process; the hash exchange must not be."""
    code = "from chunkmq.broker.routing import stable_hash; print(stable_hash('customer-1'))"
    seen = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                       capture_output=True, text=True, check=True).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str(stable_hash("customer-1"))}
