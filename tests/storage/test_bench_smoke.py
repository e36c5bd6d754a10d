from __future__ import annotations

import json

import pytest

from bench import storage as bench


def test_storage_benchmark_runs_with_tiny_counts(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--records", "4000", "--tail-mib", "1", "--json"])
    out = capsys.readouterr().out
    assert "fsync=always" in out and "reopen after SIGKILL" in out
    data = json.loads(out[out.index("[\n") :])
    assert len(data) == 10
    assert all(r["records"] > 0 and r["seconds"] >= 0 for r in data)
    assert data[-1]["records"] * 144 >= 1 << 20  # the whole 1 MiB tail (144-byte records) was replayed


def test_the_codec_timings_time_both_codecs_on_every_case() -> None:
    rows = bench.codec_timings(repeat=1, total=2000)
    assert [(r["records"], r["codec"]) for r in rows] == [
        (n, codec) for n in (1, 10, 100, 1000, 1000) for codec in ("python", "compiled")]
    assert all(isinstance(r["us"], float) and r["us"] > 0 for r in rows)
