"""The harness against real Redis, NATS and RabbitMQ servers (installed by the harness when missing),
and each peer's fsync-before-ack settings (workload D)."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

from bench.peers.nats import NatsServer
from bench.peers.redis import RedisServer
from tests.bench.harness import port_closed, run_bench, samples


def _clients(records: list[dict]) -> dict[str, str]:
    return {r["peer"]: r["setup"] for r in records if r["type"] == "client"}


def test_redis_and_nats_run_every_workload_and_are_stopped(tmp_path: Path) -> None:
    proc, records = run_bench(tmp_path, "--peers", "redis,nats", "--count", "500", "--repeat", "1",
                              "--workloads", "W1,W2,W4,W5,W6,B", "--backlog", "500", "--latency-rate", "200",
                              "--latency-seconds", "0.5", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    errors = [s for s in samples(records) if s["error"]]
    assert not errors, errors
    for peer in ("redis", "nats"):
        metrics = {s["metric"] for s in samples(records) if s["peer"] == peer}
        assert {"w1_produce", "w2_consume", "w4_p99", "w5_fill", "w5_disk", "w6_restart", "w5_drain",
                "b_publish", "b_read"} <= metrics
    peers = {r["kind"]: r for r in records if r["type"] == "peer"}
    assert peers["redis"]["version"] and peers["nats"]["version"]
    for server in (r for r in records if r["type"] == "server"):
        assert port_closed(server["endpoint"]["port"]), server
    # The parser was read off a live connection, and the header shows every client's setup.
    clients = _clients(records)
    assert "parser in use: _HiredisParser" in clients["redis"]
    assert "push consumer" in clients["nats"]
    assert f"  - redis: {clients['redis']}" in proc.stdout


def test_rabbitmq_queues_and_streams_run_and_are_stopped(tmp_path: Path) -> None:
    proc, records = run_bench(tmp_path, "--peers", "rabbitmq,rabbitmq-stream", "--count", "500",
                              "--repeat", "1", "--workloads", "W1,W2,B", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    errors = [s for s in samples(records) if s["error"]]
    assert not errors, errors
    got = {(s["peer"], s["metric"]): s for s in samples(records)}
    for peer in ("rabbitmq", "rabbitmq-stream"):
        assert got[(peer, "w2_consume")]["messages"] == got[(peer, "w1_produce")]["messages"] == 500
        assert got[(peer, "b_read")]["messages"] == got[(peer, "b_publish")]["messages"] == 500
    [server] = [r for r in records if r["type"] == "server"]
    assert "classic" in server["durability"] and server["endpoint"]["extra"]["queue_type"] == "classic"
    assert port_closed(server["endpoint"]["port"])
    assert port_closed(int(server["endpoint"]["extra"]["stream_port"]))


def test_durable_class_fsyncs_before_ack_and_leaves_out_what_cannot(tmp_path: Path) -> None:
    # --max-seconds cuts produce phases short (NATS with sync always needs more than 50 ms for 300).
    proc, records = run_bench(tmp_path, "--peers", "redis,nats,rabbitmq-stream", "--count", "1500",
                              "--repeat", "1", "--workloads", "D", "--max-seconds", "0.05", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert not [s for s in samples(records) if s["error"]]
    got = {(s["peer"], s["metric"]): s for s in samples(records)}
    assert set(got) == {(p, m) for p in ("redis", "nats") for m in ("d_produce", "d_consume")}
    for peer in ("redis", "nats"):
        produced = got[(peer, "d_produce")]
        assert 0 < produced["messages"] <= 300  # D moves count/5
        assert produced["extra"].get("capped", False) == (produced["messages"] < 300)
        assert got[(peer, "d_consume")]["messages"] == produced["messages"]
    assert {r["class"] for r in records if r["type"] == "server"} == {"fsync before ack"}
    durability = {r["kind"]: r["durability"] for r in records if r["type"] == "server"}
    assert durability["redis"] == "appendonly yes, appendfsync always"
    assert "sync_interval: always" in durability["nats"]
    [excluded] = [r for r in records if r["type"] == "excluded"]
    assert excluded["peer"] == "rabbitmq-stream" and "fsync" in excluded["reason"]
    assert "- rabbitmq-stream not run: not in the fsync-before-ack class" in proc.stdout


def test_servers_really_run_with_fsync_always(tmp_path: Path) -> None:
    redis, nats = RedisServer(tmp_path / "redis", "always"), NatsServer(tmp_path / "nats", "always")
    try:
        redis.start()
        with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as s:
            s.sendall(b"CONFIG GET appendfsync\r\n")
            assert b"always" in s.recv(256)
        nats.start()
        with urllib.request.urlopen(f"http://127.0.0.1:{nats.monitor_port}/varz", timeout=5) as resp:
            assert json.load(resp)["jetstream"]["config"]["sync_always"] is True
    finally:
        redis.stop()
        nats.stop()
