"""The read model (app/broker/views.py) of a real broker: queue, group, exchange, chunk, index and
overview views agree with what was published, delivered and acknowledged, and render as the API's
JSON."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from chunkmq.broker import views
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import NotFound
from chunkmq.wire import codes
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
        offsets = (queue.name, queue.first_offset, queue.next_offset, queue.messages, queue.messages_in)
        assert offsets == ("q", 0, 6, 6, 6)
        assert queue.bytes > 0 and queue.settings["max_messages"] == 100 and queue.delivered == 4
        [group] = queue.groups
        assert (group.ack_floor, group.next_offset, group.lag, group.in_flight) == (2, 4, 4, 2)
        assert [c.id for c in group.consumers] == ["worker-1"] and queue.worst_group == group
        as_json = views.to_json(queue)  # settings inline, groups nested, internal counters left out
        assert as_json["max_messages"] == 100 and as_json["groups"][0]["name"] == "g"
        assert "settings" not in as_json and "delivered" not in as_json
        assert as_json["groups"][0]["oldest_unacked_age_ms"] == group.oldest_unacked_age_ms
        assert "queue" not in as_json["groups"][0] and "acked" not in as_json["groups"][0]
        assert as_json["groups"][0]["consumers"][0]["id"] == "worker-1"

        exchange = next(e for e in views.exchange_views(broker) if e.name == "ex")
        assert (exchange.type, exchange.messages_in, exchange.messages_unroutable) == ("fanout", 6, 0)
        assert views.as_json(exchange) == dataclasses.asdict(exchange)  # a view without internals: field for field
        [index] = [i for i in views.index_views(broker) if i.queue == "q"]
        assert (index.first_offset, index.next_offset, index.files) == (0, 6, 1)
        chunks = views.chunk_views(broker)
        assert chunks and sum(c.records for c in chunks) == 6 and all(0 <= c.live_share <= 1 for c in chunks)

        overview = views.overview(broker)
        assert (overview.totals.queues, overview.totals.groups, overview.totals.messages, overview.counters.published,
                overview.counters.delivered, overview.counters.acked) == (1, 1, 6, 6, 4, 2)
        assert views.to_json(overview)["totals"]["messages"] == 6

    with_broker(tmp_path, work)


def test_lookups_bindings_and_browsing(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("ex", {"type": "topic"})
        for name in ("Orders", "audit", "orders-dlq"):
            await broker.declare_queue(name, {})
        first, _ = await broker.bind({"exchange": "ex", "queue": "Orders", "routing_key": "o.#"})
        await broker.bind({"exchange": "ex", "queue": "audit", "routing_key": "#"})
        await broker.publish("ex", [{"routing_key": "o.1", "body": "text", "headers": {"h": "v"}, "tag": "t"},
                                    {"routing_key": "o.2", "body_base64": "AAE="}])

        assert views.queue_names(broker) == ["Orders", "audit", "orders-dlq"]
        assert views.queue_names(broker, "ORDERS") == ["Orders", "orders-dlq"]
        assert views.exchange_names(broker) == sorted(["amq.default", "ex"])
        assert views.has_queue(broker, "audit") and not views.has_queue(broker, "nope")
        assert views.find_queue(broker, "Orders").messages == 2
        assert views.lookup_queue(broker, "nope") is None
        assert views.find_exchange(broker, "amq.default").name == "amq.default"
        with pytest.raises(NotFound) as missing:
            views.find_queue(broker, "nope")
        assert missing.value.code == codes.QUEUE_NOT_FOUND
        with pytest.raises(NotFound) as missing:
            views.find_exchange(broker, "nope")
        assert missing.value.code == codes.EXCHANGE_NOT_FOUND
        await broker.declare_group("Orders", "g", {})
        assert views.find_group(views.find_queue(broker, "Orders"), "g").lag == 2
        with pytest.raises(NotFound) as missing:
            views.find_group(views.find_queue(broker, "Orders"), "other")
        assert missing.value.code == codes.GROUP_NOT_FOUND

        by_exchange = views.binding_views(broker, exchange="ex")
        assert [(b.queue, b.routing_key) for b in by_exchange] == [("Orders", "o.#"), ("audit", "#")]
        assert views.binding_views(broker, queue="audit") == [by_exchange[1]]
        assert views.find_binding(broker, first.id) == views.BindingView(first.id, "ex", "Orders", "o.#", {})
        with pytest.raises(NotFound) as missing:
            views.find_binding(broker, 999)
        assert missing.value.code == codes.BINDING_NOT_FOUND

        # the console's page of messages holds what the API's browse renders, field for field
        page = views.browse(broker, "Orders", None, None, 10)
        api = orjson.loads(broker.browse("Orders", None, None, 10))
        assert page.next_offset == api["next_offset"] == 2
        for view, rendered in zip(page.messages, api["messages"], strict=True):
            as_dict = {k: v for k, v in dataclasses.asdict(view).items()
                       if (v is not None or k == "tag") and k != "expired"}  # the console marks expiry
            assert as_dict == {k: v for k, v in rendered.items() if k != "delivery_count"}
        assert page.messages[0].headers == {"h": "v"} and page.messages[1].body_base64 == "AAE="
        assert views.browse(broker, "Orders", 1, None, 10).messages[0].offset == 1
        assert views.browse(broker, "Orders", None, page.messages[1].timestamp + 1, 10).messages == ()
        assert views.oldest_timestamp(broker, views.find_queue(broker, "Orders")) == page.messages[0].timestamp
        assert views.oldest_timestamp(broker, views.find_queue(broker, "orders-dlq")) is None

    with_broker(tmp_path, work)


def test_operations_views_count_what_happened(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {"max_messages": 2})
        await broker.publish("", [{"routing_key": "q", "body": f"m{i}"} for i in range(3)])  # one dropped
        await broker.pull("q", "g", 1, 0, "c")

        [gauge] = views.queue_gauges(broker)
        assert (gauge.name, gauge.messages, gauge.messages_dropped) == ("q", 2, 1) and gauge.bytes > 0
        assert gauge.groups == (views.GroupGauge("g", 2, 0),)
        counted = views.counters(broker)
        assert (counted.published, counted.delivered, counted.acked, counted.dropped) == (3, 1, 0, 1)
        space = views.storage(broker)
        assert space.disk_bytes > 0 and space.data_dir_bytes >= space.disk_bytes
        assert (space.refused_by_budget, space.refusal) == (0, None) and views.refusal(broker) is None
        assert 0 <= views.uptime_seconds(broker) < 60

    with_broker(tmp_path, work)


def test_access_lists_tokens_and_users_and_checks_logins(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        token, secret = await broker.create_token("ci", write="q.*")
        await broker.create_user("ann", "a long password", is_admin=False)
        found = await views.access(broker)
        assert [(t.name, t.write, t.prefix) for t in found.tokens] == [("ci", "q.*", secret[:8])]
        assert [(u.name, u.is_admin) for u in found.users] == [("ann", False)]
        user = await views.login(broker, "ann", "a long password")
        assert user is not None and user.name == "ann"
        assert await views.login(broker, "ann", "wrong") is None
        await broker.set_password("ann", "another long one")
        assert await views.login(broker, "ann", "another long one") is not None
        await broker.delete_user("ann")
        await broker.delete_token(token.id)
        assert await views.access(broker) == views.AccessView((), ())

    with_broker(tmp_path, work)


def test_in_flight_lists_consumer_delivery_count_and_deadline_by_offset(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {"ack_timeout_ms": 60_000})
        await broker.publish("", [{"body": f"m{i}"} for i in range(10)], queue_name="q")
        await broker.pull("q", "g", 4, 0, "c1")
        await broker.pull("q", "g", 3, 0, "c2")
        broker.ack("q", "g", {"offsets": [1, 5]})
        broker.nack("q", "g", {"offsets": [2]})  # redelivered now: its second delivery below
        before = views.now_ms()
        await broker.pull("q", "g", 1, 0, "c3")
        ids = [m["id"] for m in orjson.loads(broker.browse("q", 0, None, 10))["messages"]]

        page = views.in_flight(broker, "q", "g", limit=3)
        assert page.in_flight == 5 and page.next_after == 3
        assert [(m.offset, m.consumer, m.delivery_count) for m in page.messages] == [
            (0, "c1", 1), (2, "c3", 2), (3, "c1", 1)]
        assert [m.id for m in page.messages] == [ids[0], ids[2], ids[3]]
        assert all(before + 59_000 <= m.deadline <= views.now_ms() + 60_000 for m in page.messages)
        rest = views.in_flight(broker, "q", "g", after=3, limit=3)
        assert [(m.offset, m.consumer) for m in rest.messages] == [(4, "c2"), (6, "c2")] and rest.next_after is None
        assert views.to_json(rest)["messages"][0]["consumer"] == "c2" and "queue" not in views.to_json(rest)
        with pytest.raises(NotFound) as missing:
            views.in_flight(broker, "q", "nope")
        assert missing.value.code == codes.GROUP_NOT_FOUND

    with_broker(tmp_path, work)
