"""Run an iterator a few items ahead of its consumer, in a thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


def prefetched(items: Iterator[T], depth: int) -> Iterator[T]:
    """The items of ``items``, produced by a thread at most ``depth`` ahead of the consumer.

    A read task waits for the broker's next page while Spark converts the current one: fetching
    ahead lets both run at once (the socket reads release the GIL). Errors of the producer are
    raised in the consumer, and a consumer that stops early (a `limit`) stops the producer, which
    closes ``items`` in its own thread (closing its connection)."""
    box: queue.Queue[tuple[str, object]] = queue.Queue(depth)
    stop = threading.Event()

    def put(kind: str, value: object) -> bool:
        while not stop.is_set():
            try:
                box.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put("item", item):
                    return
            put("end", None)
        except BaseException as e:  # handed to the consumer, which raises it
            put("error", e)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="chunkmq-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = box.get()
            if kind == "end":
                return
            if kind == "error":
                assert isinstance(value, BaseException)
                raise value
            yield value  # type: ignore[misc]
    finally:
        stop.set()
