"""The read model (app/broker/views.py) of a real broker: queue, group, exchange, chunk, index and
overview views agree with what was published, delivered and acknowledged, and render as the API's
JSON."""

from __future__ import annotations

from pathlib import Path

import orjson

from chunkmq.broker import views
from chunkmq.broker.broker import Broker
from tests.broker.conftest import with_broker


def test_views_follow_publish_delivery_and_acks(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("ex", {"type": "fanout"})
        await broker.declare_queue("q", {"max_messages": 100})
        await broker.bind({"exchange": "ex", "queue": "q", "routing_key": ""})
        await broker.publish("ex", [{"body": f"m{i}"} for i in range(6)])
        got = orjson.loads(await broker.pull("q", "g", 4, 0, "worker-1"))["messages"]
        broker.ack("q", "g", {"offsets": [m["offset"] for m in got[:2]]})

        queue = views.queue_view(broker, broker.queue("q"))
        assert (queue.name, queue.first_offset, queue.next_offset, queue.messages, queue.messages_in) == ("q", 0, 6, 6, 6)
        assert queue.bytes > 0 and queue.settings["max_messages"] == 100 and queue.delivered == 4
        [group] = queue.groups
        assert (group.ack_floor, group.next_offset, group.lag, group.in_flight) == (2, 4, 4, 2)
        assert [c.id for c in group.consumers] == ["worker-1"] and queue.worst_group == group
        as_json = views.queue_json(queue)
        assert as_json["max_messages"] == 100 and as_json["groups"][0]["name"] == "g"

        exchange = next(e for e in views.exchange_views(broker) if e.name == "ex")
        assert (exchange.type, exchange.messages_in, exchange.messages_unroutable) == ("fanout", 6, 0)
        assert views.as_json(exchange)["name"] == "ex"
        [index] = [i for i in views.index_views(broker) if i.queue == "q"]
        assert (index.first_offset, index.next_offset, index.files) == (0, 6, 1)
        chunks = views.chunk_views(broker)
        assert chunks and sum(c.records for c in chunks) == 6 and all(0 <= c.live_share <= 1 for c in chunks)

        overview = views.overview(broker)
        assert (overview.queues, overview.groups, overview.messages, overview.published, overview.delivered,
                overview.acked) == (1, 1, 6, 6, 4, 2)
        assert views.overview_json(overview)["totals"]["messages"] == 6

    with_broker(tmp_path, work)
