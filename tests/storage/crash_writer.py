"""Child process for test_crash.py: appends batches in `always` mode until it is killed.

Usage: python -m tests.storage.crash_writer <store dir> <first batch id> [gc]
Prints "ready" once the store is open, then one line per batch after durable() resolved.
Batch contents are a pure function of the batch id (see expected_batch) so the parent can check them.

With ``gc`` (tests/storage/test_gc.py): batches come from expected_gc_batch, a thread appends them
while the main thread keeps consuming queue 1 (retain) and running the collector, so kills land in
every step of a rewrite.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

from chunkmq.storage import FsyncMode, NewMessage, Store, StoreOptions

OPTIONS = StoreOptions(
    chunk_size=16 * 1024,
    index_chunk_entries=32,
    fsync=FsyncMode.ALWAYS,
    checkpoint_interval_ms=50,
    max_batch_bytes=16 * 1024,
)
QUEUES = (1, 2, 3)


def expected_batch(batch_id: int) -> list[NewMessage]:
    rng = random.Random(batch_id)
    n = rng.randint(1, 12)
    out = []
    for i in range(n):
        placed = rng.sample(QUEUES, rng.randint(1, 3))
        body = f"{batch_id}:{i}:{n}:".encode() + bytes([97 + batch_id % 26]) * rng.randint(0, 300)
        out.append(NewMessage(body, sorted(placed), tag=b"t%d" % (i % 2)))
    return out


def expected_gc_batch(batch_id: int) -> list[NewMessage]:
    """Mostly queue 1 (consumed at once); one message in 6 also or only in queue 3 (kept), so
    chunks turn sparse, not empty."""
    rng = random.Random(batch_id)
    n = rng.randint(1, 12)
    out = []
    for i in range(n):
        kept = rng.random() < 1 / 6
        placed = rng.choice([[1, 3], [3]]) if kept else [1]
        body = f"{batch_id}:{i}:{n}:".encode() + bytes([97 + batch_id % 26]) * rng.randint(0, 300)
        out.append(NewMessage(body, placed, tag=b"t%d" % (i % 2)))
    return out


def _append_forever(store: Store, batch_id: int, make: object) -> None:
    while True:
        store.append(make(batch_id))  # type: ignore[operator]
        store.durable(store.end_position).result()
        print(batch_id, flush=True)
        batch_id += 1


def main() -> None:
    store = Store.open(Path(sys.argv[1]), OPTIONS)
    for q in QUEUES:
        store.create_queue(q)
    print("ready", flush=True)
    batch_id = int(sys.argv[2])
    if sys.argv[3:] == ["gc"]:
        threading.Thread(target=_append_forever, args=(store, batch_id, expected_gc_batch), daemon=True).start()
        while True:
            store.retain({1: store.next_offset(1), 2: store.next_offset(2)})
            store.collect(0.5)
            time.sleep(0.002)
    while True:
        store.append(expected_batch(batch_id))
        store.durable(store.end_position).result()
        print(batch_id, flush=True)
        batch_id += 1


if __name__ == "__main__":
    main()
