"""Storage garbage collection benchmark (app/storage/gc.py): the slow-queue scenario and the cost.

Run: ``.venv/bin/python -m bench.gc`` (``--scale 0.1`` for a quick run, ``--json`` for machine output).

1. Scenario (issue 16): 1 MiB chunks; queue ``events`` gets 199,800 messages, queue ``audit`` one after
   every 999 (200). Records carry 187 data bytes, so each takes 231 bytes as a 100-byte broker message
   with a routing key does. ``events`` expires (its floor passes everything), retention runs, then one
   collector pass: chunk file bytes on disk before and after, against ``audit``'s live bytes.
2. Cost: a store of sealed chunks a third live (one message in three kept), collected by the
   background thread's loop at its default duty while one thread publishes batches of 100 messages
   of 100 bytes into another queue: the publish rate in windows while the collector works against
   windows on the same store while it is paused (alternating, so the machine's other load hits both
   alike), and how fast the collector reclaims (freed MB/s of the windows it worked in). The same
   pass at full speed (Store.collect) gives the collector's own rate.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from chunkmq.storage import FsyncMode, GcReport, NewMessage, Store, StoreClosed, StoreOptions
from chunkmq.storage.gc import collect

MIB = 1 << 20
WINDOWS = 8  # pairs of publish windows (idle, collector working)
EVENTS, AUDIT, PUBLISH = 1, 2, 3


def _log_bytes(store: Store, sealed_only: bool = False) -> int:
    total = 0
    for c in store.chunks():
        if not sealed_only or c.state == "sealed":
            total += os.stat(c.path).st_blocks * 512
    return total


def _index_bytes(store: Store) -> int:
    """Allocated bytes of every queue index file."""
    return sum(p.stat().st_blocks * 512 for p in (store.root / "queues").rglob("*.idx"))


def _options(**kw: Any) -> StoreOptions:
    return StoreOptions(chunk_size=MIB, fsync=FsyncMode.INTERVAL, **kw)


def scenario(directory: Path, scale: float) -> dict[str, Any]:
    events_per_audit, audits = 999, max(10, int(200 * scale))
    body = b"e" * 187
    with Store.open(directory, _options()) as store:
        store.create_queue(EVENTS)
        store.create_queue(AUDIT)
        for i in range(audits):
            for start in range(0, events_per_audit, 111):
                store.append([NewMessage(body, [EVENTS]) for _ in range(min(111, events_per_audit - start))])
            store.append([NewMessage(b"audit-%06d-" % i + b"a" * 174, [AUDIT])])
        store.flush()
        written = _log_bytes(store)
        store.retain({EVENTS: store.next_offset(EVENTS)})  # events expired: its floor passed everything
        after_retention = _log_bytes(store)
        live = store.queue_bytes(AUDIT)
        sealed_live = sum(c.live_bytes for c in store.chunks() if c.state == "sealed")
        sealed_before = _log_bytes(store, sealed_only=True)
        chunks_before = len(store.chunks())
        index_before = _index_bytes(store)
        report = store.collect()
        sealed_after = _log_bytes(store, sealed_only=True)
        for _ in range(2):  # the next two passes (the broker runs one every 5 s): index blocks are freed
            store.retain({EVENTS: store.next_offset(EVENTS)})
        result = {
            "messages": store.next_offset(EVENTS) + store.next_offset(AUDIT),
            "log_bytes_written": written,
            "log_bytes_after_retention": after_retention,
            "log_bytes_after_gc": _log_bytes(store),
            "sealed_bytes_before_gc": sealed_before,
            "sealed_bytes_after_gc": sealed_after,
            "sealed_live_bytes": sealed_live,
            "live_bytes": live,
            "ratio_sealed": round(sealed_after / max(1, sealed_live), 2),
            "index_bytes_after_retention": index_before,
            "index_bytes_two_passes_later": _index_bytes(store),
            "chunk_files_before": chunks_before,
            "chunk_files_after": len(store.chunks()),
            "gc_seconds": round(report.seconds, 3),
            "reclaim_mb_s": round(report.bytes_freed / 1e6 / max(report.seconds, 1e-9), 1),
        }
        for _, _, _, _, _, data in store.read(AUDIT, 0, 1000):
            assert data.startswith(b"audit-")
        assert len(store.read(AUDIT, 0, 1000)) == audits
    return result


def _fill_third_live(store: Store, megabytes: int) -> None:
    body = b"x" * 100
    batch = [NewMessage(body, [AUDIT] if i % 3 == 0 else [EVENTS]) for i in range(300)]
    while store.end_position < megabytes * MIB:
        store.append(batch)
    store.flush()
    store.retain({EVENTS: store.next_offset(EVENTS)})


def _publish_rate(store: Store, seconds: float, until: threading.Event | None = None) -> tuple[float, float]:
    batch = [NewMessage(b"p" * 100, [PUBLISH]) for _ in range(100)]
    n = 0
    t0 = time.perf_counter()
    while True:
        store.append(batch)
        n += 100
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds or (until is not None and until.is_set()):
            return n / elapsed, elapsed


def cost(directory: Path, scale: float) -> dict[str, Any]:
    megabytes = max(2, int(96 * scale))
    window = max(0.3, 2.0 * scale)
    with Store.open(directory / "b", _options(tail_cache_bytes=0)) as store:  # no thread: started by hand
        for q in (EVENTS, AUDIT, PUBLISH):
            store.create_queue(q)
        _fill_third_live(store, megabytes)
        sealed_before = _log_bytes(store, sealed_only=True)
        upto = max(c.number for c in store.chunks() if c.state == "sealed")  # what publishing adds is not counted
        # Alternating windows on the same store and publisher, so that the machine's other load hits
        # both alike: idle (the collector paused), then a window with the collector thread's loop body
        # at its default duty, and so on until its pass is done.
        idle: list[float] = []
        busy: list[float] = []
        run, done, stop = threading.Event(), threading.Event(), threading.Event()
        out: dict[str, GcReport] = {}

        def work() -> None:
            try:
                out["report"] = collect(store, 0.5, StoreOptions().gc_duty, stop, run)
            except StoreClosed:  # stopped after the last window
                pass
            done.set()

        worker = threading.Thread(target=work)
        worker.start()
        gc_seconds = 0.0
        while not done.is_set() and len(busy) < WINDOWS:  # publishing grows the store: bounded
            idle.append(_publish_rate(store, window)[0])
            run.set()
            t0 = time.perf_counter()
            busy.append(_publish_rate(store, window, until=done)[0])
            run.clear()
            gc_seconds += time.perf_counter() - t0
        stop.set()
        run.set()
        worker.join()
        freed = sealed_before - sum(os.stat(c.path).st_blocks * 512 for c in store.chunks() if c.number <= upto)
        copied = sum(c.data_bytes for c in store.chunks() if c.rewritten)
    with Store.open(directory / "c", _options(tail_cache_bytes=0)) as store:
        for q in (EVENTS, AUDIT, PUBLISH):
            store.create_queue(q)
        _fill_third_live(store, megabytes)
        full = store.collect()
    mean_idle, mean_busy = sum(idle) / len(idle), sum(busy) / len(busy)
    return {
        "store_mb": megabytes,
        "sealed_bytes_before_gc": sealed_before,
        "windows": len(busy),
        "gc_pass_finished": done.is_set() and "report" in out,
        "window_seconds": window,
        "publish_idle_msgs_s": round(mean_idle),
        "publish_during_gc_msgs_s": round(mean_busy),
        "publish_during_gc_share": round(mean_busy / mean_idle, 3),
        "gc_duty": StoreOptions().gc_duty,
        "gc_thread_seconds": round(gc_seconds, 2),
        "gc_thread_freed_bytes": freed,
        "gc_thread_reclaim_mb_s": round(freed / 1e6 / gc_seconds, 2),
        "gc_thread_copied_mb_s": round(copied / 1e6 / gc_seconds, 1),
        "gc_full_speed_seconds": round(full.seconds, 2),
        "gc_full_speed_reclaim_mb_s": round(full.bytes_freed / 1e6 / full.seconds, 1),
        "gc_full_speed_copied_mb_s": round(full.bytes_copied / 1e6 / full.seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full-size counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chunkmq-gc-") as tmp:
        results = {"scenario": scenario(Path(tmp) / "scenario", args.scale), "cost": cost(Path(tmp), args.scale)}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, values in results.items():
        print(f"## {name}")
        for key, value in values.items():
            print(f"  {key}: {value:,}" if isinstance(value, int) else f"  {key}: {value}")


if __name__ == "__main__":
    main()
