"""RestingViews (app/broker/resting.py) on a real broker: a round builds views only of the queues that
changed or are not at rest, and every view it gives is the one queue_view would build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from chunkmq.broker.base import now_ms
from chunkmq.broker.broker import Broker
from chunkmq.broker.group import Group
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
                assert resting.view(queue.name, now) == queue_view(broker, queue, now), queue.name
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


def test_lagging_groups_follow_changes_and_equal_a_look_at_every_group(tmp_path: Path, monkeypatch: Any) -> None:
    async def work(broker: Broker) -> None:
        for i in range(5):
            await broker.declare_queue(f"q{i}", {})
            await broker.declare_group(f"q{i}", "g", {})
        lagging = broker.lagging

        def every() -> list[tuple[int, str, str]]:
            return sorted((g.lag_in(broker.store), q.name, g.name) for q in broker.queues.values()
                          for g in q.groups.values() if g.lag_in(broker.store) > 0)

        def got() -> list[tuple[int, str, str]]:
            return sorted((lag, q.name, g.name) for lag, q, g in lagging.candidates())

        assert got() == every() == []  # the first call looks at every queue
        looked: list[int] = []
        lag_in = Group.lag_in
        monkeypatch.setattr(Group, "lag_in", lambda g, store: looked.append(g.queue_id) or lag_in(g, store))
        await broker.publish("", [{"body": "x", "routing_key": "q1"}] * 2)
        looked.clear()
        assert got() == [(2, "q1", "g")] and set(looked) == {broker.queue("q1").id}
        body = orjson.loads(await broker.pull("q1", "g", 2, 0, "c"))
        broker.ack("q1", "g", {"up_to": body["messages"][-1]["offset"] + 1})
        await broker.declare_group("q3", "h", {})  # at earliest of an empty queue: no lag
        broker.seek("q1", "g", {"to": "earliest"})  # lag again
        looked.clear()
        now = got()
        assert set(looked) <= {broker.queue("q1").id, broker.queue("q3").id}
        assert now == every() == [(2, "q1", "g")]
        await broker.delete_queue("q1", force=True)
        assert got() == every() == []

    with_broker(tmp_path, work)
