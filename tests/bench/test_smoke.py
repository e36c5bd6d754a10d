"""The harness in smoke mode (tiny counts, chunkmq only), end to end, so it cannot rot."""

from __future__ import annotations

from pathlib import Path

from bench.metrics import METRICS
from tests.bench.harness import port_closed, run_bench, samples

# W7 and W8's fsync=always pair are chunkmq's REST only
WS_METRICS = [k for k, m in METRICS.items() if m.workload != "W7" and not k.startswith("w8_always")]
W8_METRICS = ["w8_rate", "w8_cpu_us", "w8_p50", "w8_p99"]


def test_smoke_measures_every_workload_and_stops_the_server(tmp_path: Path) -> None:
    # about 30 s on an idle two-core machine; the limit leaves room for a loaded one
    proc, records = run_bench(tmp_path, "--smoke", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    errors = [s for s in samples(records) if s["error"]]
    assert not errors, errors
    got = {(s["peer"], s["metric"]): s for s in samples(records)}
    # W8's bare ASGI floors (bench/floor.py) were measured in the same run, beside chunkmq
    for peer, metrics in (("chunkmq-http", list(METRICS)), ("chunkmq-ws", WS_METRICS), ("floor-http", W8_METRICS),
                          ("floor-ws", W8_METRICS)):
        for key in metrics:
            sample = got.get((peer, key))
            assert sample is not None, f"{peer} did not report {key}"
            assert sample["value"] > 0, sample
    # Throughput phases moved exactly the messages asked for (the backlog survived the restart).
    assert got[("chunkmq-http", "w5_drain")]["messages"] == got[("chunkmq-http", "w5_fill")]["messages"]

    # The markdown table was printed and saved, and the server is gone.
    assert "| W1 produce 100 B | msgs/s |" in proc.stdout
    assert "- W8 server CPU per request: chunkmq-http " in proc.stdout and "(group commit)" in proc.stdout
    assert list(tmp_path.glob("bench-*.md"))
    # D ran on a second server started with fsync=always, after the first one stopped.
    servers = [r for r in records if r["type"] == "server"]
    assert [(s["kind"], s["class"]) for s in servers] == [("chunkmq", "default"), ("chunkmq", "fsync before ack")]
    assert "fsync=always" in servers[1]["durability"]
    assert all(port_closed(s["endpoint"]["port"]) for s in servers)
