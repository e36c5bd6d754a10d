"""Storage engine benchmark: append, read back, reopen after a kill.

Run by hand: ``.venv/bin/python -m bench.storage`` (``--records``, ``--tail-mib`` to scale down;
``--json`` for machine-readable output). Each case uses a fresh temporary directory.

Cases:
- raw baseline: the same bytes written to a plain file, one write per batch (no framing, no index)
- append, batches of 100 and 1,000, fsync=interval, one writer thread
- append, batches of 100 and 1,000, fsync=always, 4 writer threads, each waiting for durable()
- read back every queue sequentially (1,000 per read call), right after the interval run
- reopen after SIGKILL with an unflushed tail of --tail-mib MiB (the recovery scan + index replay)

``--codec`` times only the byte formats' codecs, in this process, on the pure-Python path and on the
compiled twin: µs of CPU per record of encode_batch for batches of 1, 10, 100 and 1,000 records of
100 bytes, of the column read of a page of 1,000 (record_columns.columns, CRCs checked), of the wire batch's
encoders and decoders (chunkmq.wire.batch) and of the blob parser (chunkmq.broker.blob.parse) for
batches and pages of 1, 100 and 1,000 messages of 100 bytes.

First it prints the bytes one message takes on disk: a 100-byte text message with a 9-character
routing key, no headers, published through the default exchange and through a named one (the
broker's stored blob, its record in the log, and its queue index entry).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from chunkmq.main import tune_gc
from chunkmq.storage import FsyncMode, NewMessage, Store, StoreOptions

RECORD_BYTES = 100
QUEUES = 4


@dataclass
class Result:
    case: str
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_s(self) -> float:
        return self.rate * RECORD_BYTES / 1e6

    def row(self) -> str:
        return f"| {self.case} | {self.records:,} | {self.seconds:.2f} | {self.rate:,.0f} | {self.mb_s:.1f} |"


def _batches(records: int, batch: int) -> list[list[NewMessage]]:
    body = b"x" * RECORD_BYTES
    return [[NewMessage(body, [i % QUEUES]) for _ in range(batch)] for i in range(records // batch)]


def _open(directory: Path, mode: FsyncMode, chunk_size: int = 256 * 1024 * 1024) -> Store:
    store = Store.open(directory, StoreOptions(fsync=mode, chunk_size=chunk_size))
    for q in range(QUEUES):
        store.create_queue(q)
    return store


def raw_baseline(directory: Path, records: int, batch: int) -> Result:
    buf = b"x" * (RECORD_BYTES * batch)
    fd = os.open(directory / "raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    for _ in range(records // batch):
        os.write(fd, buf)
    os.fdatasync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    return Result(f"raw file write, batches of {batch:,}", records, dt)


def _read_all(store: Store) -> int:
    n = 0
    for q in range(QUEUES):
        offset = 0
        while True:
            got = store.read(q, offset, 1000)
            if not got:
                break
            n += len(got)
            offset = got[-1][0] + 1  # the last message's offset
    return n


def append_interval(directory: Path, records: int, batch: int) -> tuple[Result, Result, Result]:
    work = _batches(records, batch)
    tune_gc()  # the server's GC settings (app/main.py); also keeps the prepared batches out of collections
    store = _open(directory, FsyncMode.INTERVAL)
    t0 = time.perf_counter()
    for b in work:
        store.append(b)
    dt = time.perf_counter() - t0
    appended = Result(f"append, batches of {batch:,}, fsync=interval", records, dt)
    del work
    t0 = time.perf_counter()
    n = _read_all(store)
    dt = time.perf_counter() - t0
    store.close()
    checked = Result(f"read back per queue, 1,000 per call (written in batches of {batch:,})", n, dt)
    store = Store.open(directory, StoreOptions(verify_reads=False))
    t0 = time.perf_counter()
    n = _read_all(store)
    dt = time.perf_counter() - t0
    store.close()
    return appended, checked, Result("the same read, verify_reads=False (no CRC check per record)", n, dt)


def append_always(directory: Path, records: int, batch: int, threads: int = 4) -> Result:
    store = _open(directory, FsyncMode.ALWAYS)
    per_thread = _batches(records // threads, batch)
    tune_gc()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for b in per_thread:
                store.append(b)
                store.durable(store.end_position).result()
        except BaseException as exc:  # reported after join
            errors.append(exc)

    workers = [threading.Thread(target=writer) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    dt = time.perf_counter() - t0
    syncs = store._flusher.syncs
    store.close()
    if errors:
        raise errors[0]
    n = len(per_thread) * batch * threads
    return Result(f"append, batches of {batch:,}, fsync=always, {threads} threads ({syncs:,} fsyncs)", n, dt)


def _tail_writer(directory: str, tail_bytes: int) -> None:
    """Child of reopen_after_kill: write `tail_bytes` without a recovery point, then wait to be killed."""
    store = Store.open(Path(directory), StoreOptions(fsync=FsyncMode.NEVER, checkpoint_interval_ms=10**9))
    for q in range(QUEUES):
        store.create_queue(q)
    store.flush()  # the recovery point: everything after it is the tail
    body = b"x" * RECORD_BYTES
    i = 0
    while store.end_position < tail_bytes:
        store.append([NewMessage(body, [i % QUEUES]) for _ in range(1000)])
        i += 1
    print(store.end_position, flush=True)
    time.sleep(3600)


def reopen_after_kill(directory: Path, tail_mib: int) -> Result:
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.storage", "--tail-writer", str(directory), str(tail_mib << 20)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert child.stdout is not None
    child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    t0 = time.perf_counter()
    store = Store.open(directory, StoreOptions())
    dt = time.perf_counter() - t0
    replayed = store.recovery.records_replayed
    store.close()
    return Result(f"reopen after SIGKILL, {tail_mib} MiB unflushed tail (records replayed)", replayed, dt)


def bytes_per_message(directory: Path, count: int = 10_000) -> dict[str, float]:
    """Log bytes per message (blob + record framing) plus the index entry, for `count` messages of
    100 text bytes with the routing key "orders.eu", at queue offsets from 0 up."""
    from chunkmq.broker.message import MessageLimits, parse_batch
    from chunkmq.storage.queue_index import ENTRY_SIZE

    out: dict[str, float] = {}
    for exchange in ("", "orders"):
        messages = [{"body": "x" * 100, "routing_key": "orders.eu"}] * 1000
        batch = parse_batch(messages, exchange, MessageLimits(64, 65536))
        with Store.open(directory / (exchange or "default"), StoreOptions(fsync=FsyncMode.NEVER)) as store:
            store.create_queue(1)
            for _ in range(count // 1000):
                store.append([NewMessage(blob, [1]) for blob in batch.blobs])
            out[exchange or "(default)"] = store.end_position / count + ENTRY_SIZE
            out[f"blob {exchange or '(default)'}"] = len(batch.blobs[0])
    return out


def run(records: int, tail_mib: int) -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="chunkmq-bench-") as d:
        sizes = bytes_per_message(Path(d))
    print(f"bytes per 100-byte message with a routing key, index entry included: default exchange "
          f"{sizes['(default)']:.1f} (blob {sizes['blob (default)']:.0f}), exchange 'orders' {sizes['orders']:.1f} "
          f"(blob {sizes['blob orders']:.0f})\n", flush=True)

    def case(fn, *args):  # type: ignore[no-untyped-def]
        with tempfile.TemporaryDirectory(prefix="chunkmq-bench-") as d:
            out = fn(Path(d), *args)
        for r in out if isinstance(out, tuple) else (out,):
            results.append(r)
            print(r.row(), flush=True)

    print("| case | records | seconds | records/s | MB/s |\n|---|---:|---:|---:|---:|", flush=True)
    case(raw_baseline, records, 1000)
    for batch in (100, 1000):
        case(append_interval, records, batch)
    for batch in (100, 1000):
        case(append_always, records, batch)
    case(reopen_after_kill, tail_mib)
    return results


def _per_record(fn, records: int, repeat: int, total: int) -> float:  # type: ignore[no-untyped-def]
    """µs of this process's CPU per record: the best of ``repeat`` rounds of ``fn`` (which handles
    ``records`` records per call) over about ``total`` records each (the best round is the one other
    work on the machine disturbed least)."""
    calls = max(1, total // records)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - t0)
    return best / (calls * records) * 1e6


def codec_timings(repeat: int = 5, total: int = 200_000) -> list[dict[str, object]]:
    """µs per record of the byte formats' hot loops, Python path against compiled twin, in pairs."""
    import numpy as np

    from chunkmq.broker import _blobc, blob
    from chunkmq.storage import MessageColumns, record_columns, record_encode
    from chunkmq.storage import _recordc as compiled  # whatever CHUNKMQ_PURE_PYTHON says: both are timed
    from chunkmq.wire import _batchc
    from chunkmq.wire import batch as wire
    rows: list[dict[str, object]] = []

    def on(module: object, attr: str, twin: object, name: str, records: int, fn) -> None:  # type: ignore[no-untyped-def]
        for codec in (None, twin):
            saved = getattr(module, attr)
            setattr(module, attr, codec)
            try:
                rows.append({"what": name, "records": records,
                             "codec": "compiled" if codec is not None else "python",
                             "us": _per_record(fn, records, repeat, total)})
            finally:
                setattr(module, attr, saved)

    for n in (1, 10, 100, 1000):
        batch = MessageColumns([b"x" * RECORD_BYTES] * n, [(1,)] * n)
        on(record_encode, "_recordc", compiled, f"encode_batch, batches of {n:,}", n,
           lambda batch=batch: record_encode.encode_batch(batch, 1_700_000_000_000, 0, {1: 70_000}, 1 << 20, {}))
    batch = MessageColumns([b"x" * RECORD_BYTES] * 1000, [(1,)] * 1000)
    buf, appended, _ = record_encode.encode_records(batch, 1_700_000_000_000, 0, {1: 70_000}, 1 << 20, {})
    starts = np.array(appended.positions, np.int64)
    lengths = np.diff(np.append(starts, len(buf)))
    verify = np.ones(len(starts), bool)
    on(record_columns, "_recordc", compiled, "column read of 1,000, CRCs checked", 1000,
       lambda: record_columns.columns(buf, starts, lengths, verify))
    for n in (1, 100, 1000):
        for name, fn in _wire_cases(wire, blob, n).items():
            on(blob if name.startswith("blob") else wire, "_blobc" if name.startswith("blob") else "_batchc",
               _blobc if name.startswith("blob") else _batchc, f"{name}, {n:,}", n, fn)
    return rows


def _wire_cases(wire, blob, n: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The wire batch's encoders and decoders and the blob parser on n messages of 100 bytes with a
    9-byte routing key, as the client and the server call them."""
    import numpy as np

    key, bodies = b"orders.eu", b"x" * RECORD_BYTES * n
    body = wire.encode_publish_text([RECORD_BYTES] * n, key, bodies)
    ids = list(range(1 << 30, (1 << 30) + 117 * n, 117))
    offsets = list(range(70_000, 70_000 + n))
    results = wire.encode_results(ids, None, offsets, b"\x06" * n, b"orders" * n)
    columns = (np.array(offsets, np.int64), np.array(ids, np.int64), np.full(n, 1_700_000_000_000, np.int64),
               np.broadcast_to(1, (n,)), np.zeros(n, bool), np.zeros(n, np.int64), np.full(n, len(key), np.int64),
               np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, RECORD_BYTES, np.int64))
    regions = (b"", key * n, b"", b"", bodies)
    delivered = wire.encode_delivered(n, columns, regions)
    blobs = [blob.encode_blob(b"", key, None, b"x" * RECORD_BYTES, False) for _ in range(n)]
    page = np.frombuffer(b"".join(bytes(6) + b for b in blobs), np.uint8)  # 6: a record's framing between
    starts = np.arange(n, dtype=np.int64) * (len(blobs[0]) + 6) + 6
    sizes = np.full(n, len(blobs[0]), np.int64)

    def decode_publish() -> None:
        got = wire.decode_publish(body, n)
        wire.slices(body, got.keys_start, got.key_lengths)
        wire.slices(body, got.bodies_start, got.body_lengths)

    return {
        "wire encode_publish_text (client)": lambda: wire.encode_publish_text([RECORD_BYTES] * n, key, bodies),
        "wire decode_publish and slices (server)": decode_publish,
        "wire encode_results (server)": lambda: wire.encode_results(ids, None, offsets, b"\x06" * n, b"orders" * n),
        "wire decode_results (client)": lambda: wire.decode_results(results),
        "wire encode_delivered, numpy columns (server)": lambda: wire.encode_delivered(n, columns, regions),
        "wire decode_delivered (client)": lambda: wire.decode_delivered(delivered),
        "blob parse, a page": lambda: blob.parse(page, starts, sizes),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tail-mib", type=int, default=256)
    parser.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    parser.add_argument("--codec", action="store_true", help="time only the record codec, Python against compiled")
    parser.add_argument("--repeat", type=int, default=5, help="--codec: rounds per row (the best one counts)")
    parser.add_argument("--tail-writer", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tail_writer:
        _tail_writer(args.tail_writer[0], int(args.tail_writer[1]))
        return
    if args.codec:
        rows = codec_timings(args.repeat)
        print("| what | python µs/record | compiled µs/record | ratio |\n|---|---:|---:|---:|")
        for py, c in zip(rows[0::2], rows[1::2], strict=True):
            print(f"| {py['what']} | {py['us']:.3f} | {c['us']:.3f} | {py['us'] / c['us']:.1f}x |")  # type: ignore[operator]
        if args.json:
            print(json.dumps(rows, indent=2))
        return
    results = run(args.records, args.tail_mib)
    if args.json:
        print(json.dumps([asdict(r) | {"rate": r.rate, "mb_s": r.mb_s} for r in results], indent=2))


if __name__ == "__main__":
    main()
