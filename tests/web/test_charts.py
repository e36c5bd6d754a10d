"""Chart data for the console (app/web/charts.py) from a real broker's history: the columns uPlot
draws, one line per group, the overview summed over queues, and the range refused when unknown."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from chunkmq.broker import views
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.web.charts import RANGES, chart, overview_charts, queue_charts, window
from tests.broker.conftest import with_broker


def test_window_and_the_column_shape() -> None:
    assert window("1h") == (None, 3600 / 720)
    since, step = window("24h")
    assert since is not None and abs(since - (time.time() - 86400) * 1000) < 60_000 and step == 120
    with pytest.raises(InvalidInput, match="range must be one of 1h, 24h, 7d"):
        window("2h")
    assert set(RANGES) == {"1h", "24h", "7d"}


def test_queue_and_overview_charts_from_the_history(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        for name in ("a", "b"):
            await broker.declare_queue(name, {})
            await broker.publish("", [{"body": "x"}] * 3, queue_name=name)
        orjson.loads(await broker.pull("a", "g1", 1, 0, "c"))
        orjson.loads(await broker.pull("a", "g2", 2, 0, "c"))
        now = int(time.time() * 1000)
        for i in range(3):  # 10 s apart: the hour's chart has a point per 5 s
            await broker.history.sample(now - (2 - i) * 10_000)
        charts = await queue_charts(broker, views.find_queue(broker, "a"), "1h")
        assert set(charts) == {"depth", "rates", "lag", "lag_seconds"}
        depth = charts["depth"]
        [line] = depth["series"]
        assert len(depth["t"]) == 3 and line["label"] == "messages" and line["values"] == [3, 3, 3]
        assert [s["label"] for s in charts["lag"]["series"]] == ["g1 (msgs)", "g2 (msgs)"]
        assert [s["values"][-1] for s in charts["lag"]["series"]] == [3, 3]  # delivered, not acknowledged
        overview = await overview_charts(broker)
        assert overview["messages"]["series"][0]["values"][-1] == 6  # both queues summed
        assert chart([], [("messages", "m")]) == {"t": [], "series": [{"label": "m", "values": []}]}

    with_broker(tmp_path, work)
