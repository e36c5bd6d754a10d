from __future__ import annotations

import json

import pytest

from bench import storage as bench
from chunkmq.storage import record_size


def test_storage_benchmark_runs_with_tiny_counts(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--records", "4000", "--tail-mib", "1", "--json"])
    out = capsys.readouterr().out
    assert "fsync=always" in out and "reopen after SIGKILL" in out
    data = json.loads(out[out.index("[\n") :])
    assert len(data) == 10
    assert all(r["records"] > 0 and r["seconds"] >= 0 for r in data)
    # the whole 1 MiB tail was replayed: its records (in queues < 256, at offsets < 65,536) take this each
    size = record_size(bench.RECORD_BYTES, queue_id=bench.QUEUES - 1, offset=0)
    assert data[-1]["records"] * size >= 1 << 20


def test_the_codec_timings_time_both_codecs_on_every_case() -> None:
    rows = bench.codec_timings(repeat=1, total=2000)
    record = [(n, codec) for n in (1, 10, 100, 1000, 1000) for codec in ("python", "compiled")]
    wire = [(n, codec) for n in (1, 100, 1000) for _ in range(7) for codec in ("python", "compiled")]
    assert [(r["records"], r["codec"]) for r in rows] == record + wire
    assert sum(str(r["what"]).startswith("blob parse") for r in rows) == 6
    assert all(isinstance(r["us"], float) and r["us"] > 0 for r in rows)
