"""RestingViews (app/broker/resting.py) on a real broker: a round builds views only of the queues that
changed or are not at rest, and every view it gives is the one queue_view would build."""

from __future__ import annotations

from pathlib import Path

import orjson

from chunkmq.broker.base import now_ms
from chunkmq.broker.broker import Broker
from chunkmq.broker.resting import RestingViews
from chunkmq.broker.views import queue_view
from tests.broker.conftest import with_broker


def test_a_round_builds_views_only_where_something_changed_and_they_equal_fresh_views(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        for i in range(6):
            await broker.declare_queue(f"q{i}", {})
            await broker.declare_group(f"q{i}", "g", {})
        await broker.publish("", [{"body": "x", "routing_key": "q5"}])  # q5's group lags: never kept
        resting = RestingViews(broker, "test")

        def round_() -> int:
            before = resting.built
            resting.start_round()
            now = now_ms()
            for queue in broker.queues.values():
                assert resting.view(queue, now) == queue_view(broker, queue, now), queue.name
            return resting.built - before

        assert round_() == 6  # the first round: every queue
        assert round_() == 1  # q5 only
        await broker.publish("", [{"body": "x", "routing_key": "q1"}])  # q1 changes, then lags
        assert round_() == 2
        await broker.update_queue("q2", {"max_messages": 10})  # settings are in the view
        await broker.declare_group("q3", "h", {"start": "latest"})  # a new group too
        assert round_() == 4  # q1, q2, q3, q5
        body = orjson.loads(await broker.pull("q1", "g", 1, 0, "c1"))
        broker.ack("q1", "g", {"offsets": [body["messages"][0]["offset"]]})
        assert round_() == 2  # q1 (a consumer was seen: not at rest), q5
        deleted = broker.queue("q4").id
        await broker.delete_queue("q4", force=True)
        assert round_() == 2 and deleted not in resting._kept  # its kept view goes with it

    with_broker(tmp_path, work)
