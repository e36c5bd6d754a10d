"""The harness against real Redis and NATS servers (installed by the harness when missing).

RabbitMQ is left to `make bench`: its start-up alone takes several seconds of both cores.
"""

from __future__ import annotations

from pathlib import Path

from tests.bench.harness import port_closed, run_bench, samples


def test_redis_and_nats_run_every_workload_and_are_stopped(tmp_path: Path) -> None:
    proc, records = run_bench(tmp_path, "--peers", "redis,nats", "--count", "500", "--repeat", "1",
                              "--workloads", "W1,W2,W4,W5,W6", "--latency-rate", "200",
                              "--latency-seconds", "0.5", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    errors = [s for s in samples(records) if s["error"]]
    assert not errors, errors
    for peer in ("redis", "nats"):
        metrics = {s["metric"] for s in samples(records) if s["peer"] == peer}
        assert {"w1_produce", "w2_consume", "w4_p99", "w5_fill", "w5_disk", "w6_restart", "w5_drain"} <= metrics
    peers = {r["kind"]: r for r in records if r["type"] == "peer"}
    assert peers["redis"]["version"] and peers["nats"]["version"]
    for server in (r for r in records if r["type"] == "server"):
        assert port_closed(server["endpoint"]["port"]), server
