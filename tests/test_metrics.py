"""app/metrics.py: the durability-wait histogram lives in chunkmq's own registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from chunkmq import metrics

NAME = "chunkmq_publish_durability_wait_seconds"


def _sample(name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_an_observed_wait_lands_in_its_bucket_and_the_ones_above() -> None:
    before = {le: _sample(f"{NAME}_bucket", le=le) for le in ("0.0002", "0.0005", "1.0", "+Inf")}
    count, total = _sample(f"{NAME}_count"), _sample(f"{NAME}_sum")
    metrics.fsync_wait.observe(0.0003)
    after = {le: _sample(f"{NAME}_bucket", le=le) for le in before}
    assert {le: after[le] - before[le] for le in before} == {"0.0002": 0, "0.0005": 1, "1.0": 1, "+Inf": 1}
    assert _sample(f"{NAME}_count") == count + 1
    assert abs(_sample(f"{NAME}_sum") - total - 0.0003) < 1e-9


def test_the_histogram_is_in_chunkmqs_registry_not_the_process_default() -> None:
    assert f"# TYPE {NAME} histogram" in generate_latest(metrics.registry).decode()
    assert NAME.encode() not in generate_latest(REGISTRY)
