"""Counters and rates (app/broker/stats.py): a rate is the count's change over the window of samples
it keeps, with explicit clock values so the figures are exact."""

from __future__ import annotations

import time

from chunkmq.broker.stats import _WINDOW, BrokerStats, Rate


def test_a_rate_needs_two_samples_and_a_time_span() -> None:
    rate = Rate()
    rate.add(10)
    assert rate.per_second == 0.0
    rate.sample(100.0)
    assert rate.per_second == 0.0
    rate.sample(100.0)  # no time between the two
    assert rate.per_second == 0.0 and rate.total == 10


def test_a_rate_is_the_change_over_the_kept_window() -> None:
    rate = Rate()
    for second in range(20):
        rate.sample(float(second))
        rate.add(4 if second < 10 else 8)
    # The window keeps the last _WINDOW + 1 samples: seconds 14..19, all at 8 a second.
    assert rate.per_second == 8.0
    assert rate.total == 10 * 4 + 10 * 8
    rate.sample(20.0)
    rate.sample(20.0 + _WINDOW)  # nothing added for _WINDOW seconds
    assert 0 < rate.per_second < 8.0


def test_broker_stats_sample_every_rate_at_once() -> None:
    stats = BrokerStats()
    assert abs(stats.started - time.time()) < 60
    stats.published.add(5)
    stats.delivered.add(3)
    stats.sample()
    time.sleep(0.01)
    stats.published.add(5)
    stats.sample()
    assert stats.published.per_second > 0 and stats.delivered.per_second == 0.0 and stats.acked.per_second == 0.0
    assert (stats.published.total, stats.delivered.total, stats.acked.total) == (10, 3, 0)
