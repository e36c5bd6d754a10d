"""The shared state of a store (app/storage/store_state.py): which queues changed."""

from __future__ import annotations

from collections.abc import Callable

from chunkmq.storage import (
    Store,
)
from tests.storage.conftest import msgs

Opener = Callable[..., Store]


def test_changed_queues_names_what_changed_since_each_readers_last_call(open_store: Opener) -> None:
    s = open_store()
    for q in (1, 2, 3):
        s.create_queue(q)
    assert s.changed_queues("a") == {1, 2, 3}  # the first call: every queue
    assert s.changed_queues("a") == set()
    s.append(msgs(2, 1))
    s.create_queue(4)
    assert s.changed_queues("b") == {1, 2, 3, 4}
    assert s.changed_queues("a") == {2, 4}
    s.delete_queue(1)
    s.set_first_offset(2, 1)
    assert s.changed_queues("a") == {1, 2} and s.changed_queues("b") == {1, 2}
