"""Shared view snapshots (app/web/snapshots.py)."""

from __future__ import annotations

import pytest

from chunkmq.web import snapshots as snapshots_module
from chunkmq.web.snapshots import Snapshots


def test_built_once_per_ttl_and_cleared_by_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(snapshots_module.time, "monotonic", lambda: now[0])
    builds: list[int] = []

    def build() -> int:
        builds.append(1)
        return len(builds)

    snaps = Snapshots(ttl=1.0)
    assert [snaps.get("k", build) for _ in range(10)] == [1] * 10
    now[0] = 0.99
    assert snaps.get("k", build) == 1
    now[0] = 1.0
    assert snaps.get("k", build) == 2
    snaps.clear()
    assert snaps.get("k", build) == 3
