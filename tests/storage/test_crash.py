"""Crash safety with real processes: SIGKILL a writer at random moments, reopen, check."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from chunkmq.storage import Store
from tests.storage.crash_writer import OPTIONS, QUEUES, expected_batch

ROOT = Path(__file__).resolve().parents[2]
KILLS = 40


def _check(store: Store, reported: set[int]) -> int:
    """Every reported batch is whole and intact, no batch is partial, indexes match the log.
    Returns the next free batch id."""
    batches: dict[int, list[bytes]] = defaultdict(list)
    placements: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for rec in store.scan():
        batch_id = int(rec.data.split(b":", 1)[0])
        batches[batch_id].append(rec.data)
        for q, o in rec.placements:
            placements[q].append((o, rec.data))
    for batch_id, datas in batches.items():
        want = expected_batch(batch_id)
        assert datas == [m.data for m in want], f"batch {batch_id} is partial or damaged"
    missing = reported - batches.keys()
    assert not missing, f"acknowledged batches lost: {sorted(missing)}"
    for q in QUEUES:
        got = [(offset, data) for offset, *_, data in store.read(q, 0, 1_000_000)]
        assert got == sorted(placements[q]), f"queue {q} index disagrees with the log"
        assert store.next_offset(q) == (got[-1][0] + 1 if got else 0)
    return max(batches, default=-1) + 1


def test_sigkill_loop(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    rng = random.Random(7)
    reported: set[int] = set()
    next_id = 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kills_during_appends = 0
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.crash_writer", str(directory), str(next_id)],
            stdout=subprocess.PIPE, cwd=ROOT, env=env,
        )
        assert child.stdout is not None
        if rng.random() < 0.8:  # most kills land while batches are being appended
            assert child.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.0, 0.08))
            kills_during_appends += 1
        else:  # some land during start-up and recovery
            time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        for line in child.stdout.read().split():
            if line != b"ready":
                reported.add(int(line))
        child.stdout.close()
        with Store.open(directory, OPTIONS) as store:
            next_id = max(next_id, _check(store, reported))
    assert len(reported) > 100 and kills_during_appends > 30
    with Store.open(directory, OPTIONS) as store:  # appends continue after all of that
        store.append(expected_batch(next_id))
        _check(store, reported | {next_id})
