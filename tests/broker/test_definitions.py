"""Definitions export and import (app/broker/definitions.py) on a real broker and SQLite file: the
document's shape, identical entries left alone, and a bad or conflicting entry anywhere applying
nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.definitions import export_definitions, import_definitions
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from tests.broker.conftest import with_broker

DOC: dict[str, Any] = {
    "exchanges": [{"name": "orders", "type": "topic", "alternate_exchange": "lost"},
                  {"name": "lost", "type": "fanout", "alternate_exchange": None}],
    "queues": [{"name": "eu", "max_messages": 100, "overflow": "reject_publish", "ack_timeout_ms": 5000},
               {"name": "dead"}],
    "bindings": [{"exchange": "orders", "queue": "eu", "routing_key": "eu.#", "arguments": {}},
                 {"exchange": "lost", "queue": "dead"}],
    "groups": [{"queue": "eu", "name": "billing", "tag_filter": ["created"]}, {"queue": "dead", "name": "ops"}],
    "permissions": [{"token": "shop", "is_admin": False, "configure": "", "write": "orders", "read": "eu|dead"}],
}


async def snapshot(broker: Broker) -> dict[str, Any]:
    doc = await export_definitions(broker)
    doc.pop("chunkmq_version")
    return doc


def test_import_creates_everything_and_export_describes_it(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        result = await import_definitions(broker, DOC)
        assert result["created"] == {"exchanges": 2, "queues": 2, "bindings": 2, "groups": 2, "permissions": 1}
        assert [t["token"] for t in result["tokens"]] == ["shop"]
        row = await_token(broker, result["tokens"][0]["secret"])
        assert (row.write, row.read, row.is_admin) == ("orders", "eu|dead", False)
        doc = await snapshot(broker)
        assert doc["exchanges"] == sorted(DOC["exchanges"], key=lambda e: e["name"])
        assert doc["queues"][0] == {"name": "dead", "max_messages": None, "max_bytes": None, "max_age_seconds": None,
                                    "overflow": "drop_head", "dead_letter_exchange": None,
                                    "dead_letter_routing_key": None, "max_deliveries": None, "ack_timeout_ms": 30000,
                                    "message_ttl_seconds": None}
        assert doc["queues"][1]["max_messages"] == 100 and doc["queues"][1]["overflow"] == "reject_publish"
        assert doc["bindings"] == [
            {"exchange": "lost", "queue": "dead", "routing_key": "", "arguments": {}},
            {"exchange": "orders", "queue": "eu", "routing_key": "eu.#", "arguments": {}},
        ]
        assert doc["groups"] == [{"queue": "dead", "name": "ops", "tag_filter": None},
                                 {"queue": "eu", "name": "billing", "tag_filter": ["created"]}]
        assert doc["permissions"] == DOC["permissions"]
        assert "secret" not in str(doc) and "hash" not in str(doc)
        # the routing works: a message to orders with eu.x lands in eu
        await broker.publish("orders", [{"body": "x", "routing_key": "eu.x"}])
        assert broker.store.next_offset(broker.queue("eu").id) == 1

        # importing the same document again changes nothing and creates no second token
        again = await import_definitions(broker, DOC)
        assert set(again["created"].values()) == {0} and again["tokens"] == []
        assert again["unchanged"] == {"exchanges": 2, "queues": 2, "bindings": 2, "groups": 2, "permissions": 1}
        assert await snapshot(broker) == doc

    with_broker(tmp_path, work)


def await_token(broker: Broker, secret: str) -> Any:
    row = broker.meta.find_token(secret)
    assert row is not None
    return row


BAD: list[tuple[str, Any, str]] = [
    ("queues", {"name": "bad name"}, "queues[2] 'bad name'"),
    ("queues", {"name": "q2", "max_messages": -1}, "max_messages"),
    ("queues", {"name": "q2", "colour": "red"}, "colour"),
    ("exchanges", {"name": "x2", "type": "nope"}, "exchanges[2] 'x2'"),
    ("exchanges", {"name": "amq.x", "type": "direct"}, "reserved"),
    ("bindings", {"exchange": "orders", "queue": "nowhere"}, "bindings[2]: queue 'nowhere'"),
    ("bindings", {"exchange": "nowhere", "queue": "eu"}, "exchange 'nowhere'"),
    ("bindings", {"exchange": "orders", "queue": "eu", "arguments": {"x-match": "some"}}, "x-match"),
    ("groups", {"queue": "eu", "name": "g", "tag_filter": "created"}, "groups[2] 'g'"),
    ("groups", {"queue": "nowhere", "name": "g"}, "queue 'nowhere'"),
    ("permissions", {"token": "t", "read": "("}, "permissions[1] 't'"),
    ("permissions", {"token": "t", "secret": "x"}, "secret"),
    ("permissions", {"token": "", "read": ".*"}, "permissions[1]"),
    ("queues", {"name": "eu", "max_messages": 5}, "defined twice"),
]


@pytest.mark.parametrize(("section", "entry", "named"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_entry_anywhere_applies_nothing(tmp_path: Path, section: str, entry: Any, named: str) -> None:
    doc = copy.deepcopy(DOC)
    doc[section].append(entry)

    async def work(broker: Broker) -> None:
        before = await snapshot(broker)
        with pytest.raises((InvalidInput, NotFound)) as raised:  # 404: names what neither exists nor is defined
            await import_definitions(broker, doc)
        assert named in raised.value.message
        assert await snapshot(broker) == before

    with_broker(tmp_path, work)


def test_bad_document_shapes_are_400(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        for doc in ({"queue": []}, {"queues": {}}, {"queues": ["q"]}, {"permissions": [None]}):
            with pytest.raises(InvalidInput):
                await import_definitions(broker, doc)
        assert (await snapshot(broker))["queues"] == []

    with_broker(tmp_path, work)


CONFLICTS: list[tuple[str, dict[str, Any]]] = [
    ("exchange 'orders' exists", {"exchanges": [{"name": "orders", "type": "direct"}]}),
    ("queue 'eu' exists", {"queues": [{"name": "eu", "max_messages": 7}]}),
    ("group 'billing' on queue 'eu'", {"groups": [{"queue": "eu", "name": "billing", "tag_filter": None}]}),
    ("token 'shop' exists", {"permissions": [{"token": "shop", "read": ".*"}]}),
]


@pytest.mark.parametrize(("named", "conflict"), CONFLICTS, ids=[c[0] for c in CONFLICTS])
def test_a_conflict_with_what_exists_is_409_and_applies_nothing(
    tmp_path: Path, named: str, conflict: dict[str, Any]
) -> None:
    async def work(broker: Broker) -> None:
        await import_definitions(broker, DOC)
        before = await snapshot(broker)
        doc = {"queues": [{"name": "new-queue"}], "exchanges": [{"name": "new-x", "type": "direct"}], **conflict}
        doc.setdefault("queues", []).append({"name": "new-queue-2"})
        with pytest.raises(PreconditionFailed) as raised:
            await import_definitions(broker, doc)
        assert named in raised.value.message and raised.value.status == 409
        assert await snapshot(broker) == before

    with_broker(tmp_path, work)


def test_a_single_active_consumer_group_is_exported_and_imported(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        doc = {"queues": [{"name": "q"}], "groups": [
            {"queue": "q", "name": "one", "single_active_consumer": True}, {"queue": "q", "name": "many"}]}
        await import_definitions(broker, doc)
        assert broker.queues["q"].groups["one"].single_active_consumer
        groups = (await snapshot(broker))["groups"]
        assert groups == [{"queue": "q", "name": "many", "tag_filter": None},
                          {"queue": "q", "name": "one", "tag_filter": None, "single_active_consumer": True}]
        assert (await import_definitions(broker, {"groups": groups}))["unchanged"]["groups"] == 2
        with pytest.raises(PreconditionFailed, match="single_active_consumer"):
            await import_definitions(broker, {"groups": [{"queue": "q", "name": "one"}]})
        with pytest.raises(InvalidInput, match="single_active_consumer"):
            await import_definitions(broker, {"groups": [{"queue": "q", "name": "x", "single_active_consumer": 1}]})

    with_broker(tmp_path, work)
