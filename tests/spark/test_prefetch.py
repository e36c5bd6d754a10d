"""prefetched: items in order, the producer's errors raised in the consumer, an early stop closes the source."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from chunkmq.spark.prefetch import prefetched


def test_every_item_in_order_while_the_producer_runs_ahead() -> None:
    produced: list[int] = []

    def items() -> Iterator[int]:
        for i in range(50):
            produced.append(i)
            yield i

    out = prefetched(items(), 2)
    assert next(out) == 0
    assert list(out) == list(range(1, 50))
    assert produced == list(range(50))


def test_a_producer_error_is_raised_in_the_consumer_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("page 2 failed")

    out = prefetched(items(), 2)
    assert next(out) == 1
    with pytest.raises(ValueError, match="page 2 failed"):
        next(out)


def test_a_consumer_that_stops_early_stops_the_producer_and_closes_its_source() -> None:
    closed = threading.Event()
    made: list[int] = []

    def items() -> Iterator[int]:
        try:
            for i in range(1_000_000):
                made.append(i)
                yield i
        finally:
            closed.set()  # where a read task closes its connection

    out = prefetched(items(), 2)
    assert next(out) == 0
    out.close()
    assert closed.wait(5)
    assert len(made) <= 4  # the one taken, at most 2 queued and 1 waiting to be
