"""app/broker/broker.py on a real broker (real store and SQLite file in tmp_path): declares that
confirm or refuse, deletes that would lose messages, bindings, reads by offset, time and id, and the
state a restart loads back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.broker import Broker, DedupRecovery, parse_binding, parse_exchange
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from chunkmq.broker.routing import ExchangeType
from tests.broker.conftest import with_broker


@pytest.mark.parametrize(("body", "message"), [
    ({"type": "direct", "durable": True}, "unknown fields: durable"),
    ({"type": "round_robin"}, "type must be one of"),
    ({}, "type must be one of"),
    ({"type": "topic", "alternate_exchange": 5}, "alternate_exchange"),
])
def test_parse_exchange_refuses_what_it_does_not_know(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_exchange("e", body)


def test_parse_exchange_checks_the_name_unless_builtin() -> None:
    assert parse_exchange("e", {"type": "fanout", "alternate_exchange": "ae"}) == (ExchangeType.FANOUT, "ae")
    with pytest.raises(InvalidInput):
        parse_exchange("amq.default", {"type": "direct"})
    assert parse_exchange("amq.default", {"type": "direct"}, builtin=True) == (ExchangeType.DIRECT, None)


@pytest.mark.parametrize(("body", "message"), [
    ({"exchange": "e", "queue": "q", "priority": 1}, "unknown fields: priority"),
    ({"exchange": "e"}, "exchange and queue are required strings"),
    ({"exchange": "", "queue": "q"}, "the default exchange"),
    ({"exchange": "amq.default", "queue": "q"}, "the default exchange"),
    ({"exchange": "e", "queue": "q", "routing_key": "k" * 256}, "routing_key must be a string"),
    ({"exchange": "e", "queue": "q", "arguments": {"n": 1}}, "arguments must be an object of strings"),
    ({"exchange": "e", "queue": "q", "arguments": {"x-match": "most"}}, "x-match must be all or any"),
])
def test_parse_binding_refuses_bad_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_binding(body)


def test_parse_binding_defaults() -> None:
    assert parse_binding({"exchange": "e", "queue": "q"}) == ("e", "q", "", {})


def test_exchanges_are_confirmed_when_identical_and_refused_otherwise(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        e, created = await broker.declare_exchange("e", {"type": "topic"})
        assert created and (await broker.declare_exchange("e", {"type": "topic"})) == (e, False)
        with pytest.raises(PreconditionFailed, match=re.escape(
                'exists with other settings: {"type":"topic","alternate_exchange":null}')):
            await broker.declare_exchange("e", {"type": "fanout"})
        default, created = await broker.declare_exchange("amq.default", {"type": "direct"})
        assert (default.name, created) == ("", False)
        with pytest.raises(PreconditionFailed):
            await broker.declare_exchange("amq.default", {"type": "fanout"})
        with pytest.raises(PreconditionFailed, match="cannot be deleted"):
            await broker.delete_exchange("", if_unused=False)
        await broker.declare_queue("q", {})
        await broker.bind({"exchange": "e", "queue": "q", "routing_key": "a.*"})
        with pytest.raises(PreconditionFailed, match="has 1 bindings"):
            await broker.delete_exchange("e", if_unused=True)
        await broker.delete_exchange("e", if_unused=False)
        with pytest.raises(NotFound):
            broker.exchange("e")
        assert broker.bindings(queue="q") == []

    with_broker(tmp_path, work)


def test_queues_are_confirmed_refused_and_updated(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        q, created = await broker.declare_queue("q", {"max_messages": 10})
        assert created and (await broker.declare_queue("q", {"max_messages": 10})) == (q, False)
        with pytest.raises(PreconditionFailed, match="exists with other settings"):
            await broker.declare_queue("q", {"max_messages": 11})
        with pytest.raises(InvalidInput, match="unknown fields: colour"):
            await broker.declare_queue("r", {"colour": "red"})
        with pytest.raises(InvalidInput, match="producer_visible must be true or false"):
            await broker.update_queue("q", {"producer_visible": "no"})
        await broker.publish("", [{"body": str(i), "routing_key": "q"} for i in range(5)], queue_name="q")
        updated = await broker.update_queue("q", {"max_messages": 2, "consumer_visible": False})
        assert updated is q and q.settings.max_messages == 2 and not q.consumer_visible
        assert [m["body"] for m in orjson.loads(broker.browse("q", None, None, 10))["messages"]] == ["3", "4"]

    with_broker(tmp_path, work)


def test_a_queue_with_unconsumed_messages_is_deleted_only_by_force(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("e", {"type": "fanout"})
        for name in ("a", "b"):
            await broker.declare_queue(name, {})
            await broker.bind({"exchange": "e", "queue": name})
        await broker.publish("e", [{"body": "x"}, {"body": "y"}])
        with pytest.raises(PreconditionFailed, match="'a' has 2 unconsumed messages"):
            await broker.delete_queue("a", force=False)
        got = orjson.loads(await broker.pull("b", "g", 10, 0, "c"))["messages"]
        broker.ack("b", "g", {"up_to": got[-1]["offset"] + 1})  # up_to is exclusive
        assert broker.unconsumed(broker.queue("b")) == 0
        await broker.delete_queue("b", force=False)  # its only group has everything
        await broker.delete_queue("a", force=True)
        assert broker.queues == {} and broker.bindings() == []
        with pytest.raises(NotFound):
            broker.queue("a")

    with_broker(tmp_path, work)


def test_bindings_are_idempotent_filtered_and_removed_by_id(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("e", {"type": "direct"})
        await broker.declare_queue("q", {})
        await broker.declare_queue("r", {})
        b1, created = await broker.bind({"exchange": "e", "queue": "q", "routing_key": "k"})
        assert created and (await broker.bind({"exchange": "e", "queue": "q", "routing_key": "k"})) == (b1, False)
        b2, _ = await broker.bind({"exchange": "e", "queue": "r", "routing_key": "k"})
        assert [b.id for b in broker.bindings()] == [b1.id, b2.id]
        assert broker.bindings(queue="r") == [b2] and broker.bindings(exchange="nope") == []
        with pytest.raises(NotFound):
            await broker.bind({"exchange": "e", "queue": "missing"})
        await broker.unbind(b1.id)
        with pytest.raises(NotFound) as gone:
            broker.binding(b1.id)
        assert gone.value.code == "binding_not_found"
        [result] = orjson.loads((await broker.publish("e", [{"body": "m", "routing_key": "k"}])).results)
        assert [p["queue"] for p in result["routed"]] == ["r"]

    with_broker(tmp_path, work)


def test_reads_by_offset_time_and_id(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": f"m{i}", "routing_key": "q"} for i in range(4)], queue_name="q")
        page = orjson.loads(broker.browse("q", 1, None, 2))
        assert [m["body"] for m in page["messages"]] == ["m1", "m2"] and page["next_offset"] == 3
        first = orjson.loads(broker.browse("q", None, None, 1))["messages"][0]
        assert broker.offset_at("q", first["timestamp"]) == 0
        assert orjson.loads(broker.browse("q", None, first["timestamp"] + 10**9, 5))["messages"] == []
        name, body = broker.get_message(first["id"])
        assert name == "q" and orjson.loads(body)["body"] == "m0"
        with pytest.raises(NotFound) as missing:
            broker.get_message("00000000ffffffff")
        assert missing.value.code == "message_not_found"
        assert broker.purge("q") == 4
        page = orjson.loads(broker.browse("q", 0, None, 10))
        assert page == {"messages": [], "next_offset": 4}  # past what the purge removed
        with pytest.raises(NotFound):
            broker.browse("nope", None, None, 1)

    with_broker(tmp_path, work)


def test_a_restart_loads_exchanges_queues_bindings_groups_and_messages(tmp_path: Path) -> None:
    async def before(broker: Broker) -> None:
        await broker.declare_exchange("e", {"type": "topic", "alternate_exchange": "ae"})
        await broker.declare_queue("q", {"max_messages": 100, "ack_timeout_ms": 5000})
        await broker.bind({"exchange": "e", "queue": "q", "routing_key": "a.#"})
        await broker.publish("e", [{"body": f"m{i}", "routing_key": "a.b"} for i in range(5)])
        got = orjson.loads(await broker.pull("q", "g", 2, 0, "c"))["messages"]
        broker.ack("q", "g", {"up_to": got[-1]["offset"] + 1})
        await broker.committer.round()  # as the server's shutdown does: the group state written

    async def after(broker: Broker) -> None:
        e = broker.exchange("e")
        assert (e.type, e.alternate_exchange) == (ExchangeType.TOPIC, "ae")
        q = broker.queue("q")
        assert (q.settings.max_messages, q.settings.ack_timeout_ms) == (100, 5000)
        assert [(b.exchange, b.queue, b.routing_key) for b in broker.bindings()] == [("e", "q", "a.#")]
        rest = orjson.loads(await broker.pull("q", "g", 10, 0, "c"))["messages"]
        assert [m["body"] for m in rest] == ["m2", "m3", "m4"]  # the acknowledged two are not redelivered

    with_broker(tmp_path, before)
    with_broker(tmp_path, after)


def test_an_older_data_directory_is_tightened_once(tmp_path: Path) -> None:
    """What a version that used the umask left readable by others is made owner-only at the first
    start; later starts trust the marker and walk nothing."""
    import os
    import stat

    from chunkmq.broker.broker import OWNER_ONLY_MARKER

    loose = tmp_path / "data" / "store" / "queues" / "0000000007"
    loose.mkdir(parents=True)
    for path in (loose, loose.parent, loose.parent.parent):
        os.chmod(path, 0o755)

    async def nothing(broker: Broker) -> None:
        return None

    with_broker(tmp_path, nothing)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "data" / OWNER_ONLY_MARKER).stat().st_mode) == 0o600
    os.chmod(loose, 0o755)  # not this version's doing: the marker says the walk was done
    with_broker(tmp_path, nothing)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o755


def test_the_idempotency_window_rebuild_is_logged_as_a_sentence() -> None:
    scanned = DedupRecovery(records_scanned=300, scanned_keys=5, seconds=0.0012)
    assert str(scanned) == "no usable snapshot, 5 from 300 records scanned over the window, in 1.2 ms"
    loaded = DedupRecovery(segments=2, snapshot_keys=10, scanned_from=1234, records_scanned=40, scanned_keys=2,
                           seconds=0.25)
    assert str(loaded) == ("10 from 2 snapshot segments, 2 more from 40 records scanned from position 1234, "
                           "in 250.0 ms")
    assert repr(loaded).startswith("DedupRecovery(segments=2, snapshot_keys=10")
