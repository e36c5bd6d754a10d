"""The store's internal interface: what recovery.py, retention.py and gc.py work on from outside
the Store's own modules (store.py and its store_*.py parts). A Store is one; they take this
Protocol rather than the Store class, so that store.py imports them and none of them imports it
back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .chunk import Chunk
    from .model import StoreOptions
    from .queue_index import QueueIndex
    from .tier import RemoteChunk


class StoreInternals(Protocol):
    """The parts of a Store its maintenance modules use, never its private attributes.

    - ``chunk_size``: bytes of a chunk's data region (global position // chunk_size = chunk number);
    - ``writer_lock``: the lock every writer holds (appends, queue changes, retention, a gc commit);
    - ``closed`` and ``check_open()``: whether the store was closed (StoreClosed from check_open);
    - ``queue_indexes``: queue id -> its QueueIndex (mutate only under the writer lock);
    - ``chunk_map``: chunk number -> its Chunk, the numbers a rewritten file replaced included;
      ``chunk_files()``: every chunk file once, by number; ``active_chunk``: where appends go;
    - ``remote``: chunks evicted to the bucket (tiered storage), by each number they stand for:
      their records exist; ``drop_remote(numbers)``: forget those no queue needs (writer lock held);
    - ``forget(chunk)``: take a chunk file and all its numbers out of the map (writer lock held);
    - ``adopt(chunks, queues, next_number)``: install what recovery found (Store.open only);
    - ``touch(q)`` / ``first_moved(q)``: a queue's counters (or its first offset) were changed
      outside the Store's modules (writer lock held), so the next recovery point and the rounds that read
      ``changed_queues`` see it; ``floors_changed`` and ``punch_due``: retention's own bookkeeping;
      ``pinned_from``: where the log is kept regardless (delayed records, due_index.py);
    - and the public ``end_position``, ``live_bytes()``, ``flush()``, ``root``, ``options``.
    """

    floors_changed: bool
    pinned_from: int | None
    punch_due: set[int]

    @property
    def root(self) -> Path: ...
    @property
    def options(self) -> StoreOptions: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def writer_lock(self) -> threading.RLock: ...
    @property
    def closed(self) -> bool: ...
    @property
    def queue_indexes(self) -> dict[int, QueueIndex]: ...
    @property
    def chunk_map(self) -> dict[int, Chunk]: ...
    @property
    def active_chunk(self) -> Chunk | None: ...
    @property
    def end_position(self) -> int: ...

    def check_open(self) -> None: ...
    def chunk_files(self) -> list[Chunk]: ...
    def forget(self, c: Chunk) -> None: ...
    def adopt(self, chunks: dict[int, Chunk], queues: dict[int, QueueIndex], next_number: int) -> None: ...
    def touch(self, queue_id: int) -> None: ...
    def first_moved(self, queue_id: int) -> None: ...
    def live_bytes(self) -> dict[int, int]: ...
    @property
    def remote(self) -> dict[int, RemoteChunk]: ...
    def drop_remote(self, numbers: list[int]) -> None: ...
    def flush(self) -> None: ...
