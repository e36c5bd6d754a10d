"""The report: medians, spreads and the chunkmq / best-peer ratio in the right direction."""

from __future__ import annotations

from typing import Any

from bench.metrics import METRICS, Sample, summarize
from bench.report import ratios, render


def _records(values: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]]:
    return [Sample(peer, metric, i, v, METRICS[metric].unit).to_json()
            for (peer, metric), vs in values.items() for i, v in enumerate(vs)]


def test_summary_is_median_with_half_range_spread() -> None:
    s = summarize([90.0, 100.0, 110.0])
    assert s is not None
    assert (s.median, s.low, s.high, round(s.spread_pct, 6)) == (100.0, 90.0, 110.0, 10.0)


def test_ratio_takes_best_of_each_side_by_direction() -> None:
    records = _records({
        ("chunkmq-http", "w1_produce"): [50.0, 60.0, 70.0],
        ("chunkmq-ws", "w1_produce"): [80.0, 80.0, 80.0],
        ("redis", "w1_produce"): [100.0, 200.0, 150.0],
        ("nats", "w1_produce"): [40.0, 40.0, 40.0],
        ("chunkmq-http", "w4_p99"): [2.0],
        ("redis", "w4_p99"): [4.0],
        ("nats", "w4_p99"): [1.0],
    })
    by_metric = {r.metric: r for r in ratios(records)}
    w1, w4 = by_metric["w1_produce"], by_metric["w4_p99"]
    assert (w1.chunkmq_peer, w1.best_peer, w1.ratio, w1.chunkmq_better) == ("chunkmq-ws", "redis", 80 / 150, False)
    assert (w4.best_peer, w4.ratio, w4.chunkmq_better) == ("nats", 2.0, False)


def test_render_marks_errors_and_ends_with_ratios() -> None:
    records = _records({("chunkmq-http", "w2_consume"): [10.0], ("rabbitmq", "w2_consume"): [5.0]})
    records.append(Sample("nats", "w2_consume", 0, None, "msgs/s", error="missing: nats-server").to_json())
    text = render(records)
    assert "| W2 consume + ack 100 B | msgs/s | 10 | 5 | missing | **2.00x** rabbitmq |" in text
    assert text.rstrip().splitlines()[-1].startswith("- W2 consume + ack 100 B: chunkmq-http 10 / rabbitmq 5")
