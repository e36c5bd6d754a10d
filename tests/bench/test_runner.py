"""Which servers and routines a run starts: the default class first, then the fsync-before-ack class."""

from __future__ import annotations

from bench.config import Config
from bench.runner import passes, workloads_for


def test_durable_workload_runs_on_servers_of_its_own_class() -> None:
    cfg = Config(workloads=["W1", "W2", "D", "B"], fsync="interval")
    assert passes(cfg) == [("interval", ["W1", "W2", "B"]), ("always", ["D"])]
    assert passes(Config(workloads=["D"])) == [("always", ["D"])]
    assert passes(Config(workloads=["W4"], fsync="never")) == [("never", ["W4"])]


def test_routines_per_adapter() -> None:
    assert workloads_for("redis", ["W1", "W2", "B", "W6"]) == ["W1+W2", "B", "W5+W6"]
    # RabbitMQ's management API only has the HTTP workload; the HTTP workload only HTTP adapters.
    assert workloads_for("rabbitmq-http", ["W1", "W7"]) == ["W7"]
    assert workloads_for("rabbitmq-http", ["W1", "W8"]) == ["W8"]
    assert workloads_for("chunkmq-ws", ["W8"]) == ["W8"]
    assert workloads_for("redis", ["W8"]) == []
    assert workloads_for("nats", ["W7"]) == []
