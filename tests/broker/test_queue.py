"""A queue's settings and in-memory state (app/broker/queue.py): every field validated with a message
naming it, absent fields kept from the base, and notify() waking every waiter once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.queue import Overflow, Queue, QueueSettings


def test_defaults_and_a_round_trip_through_as_dict() -> None:
    settings = QueueSettings.parse({})
    assert settings == QueueSettings() and settings.overflow is Overflow.DROP_HEAD
    full = QueueSettings.parse({"max_messages": 10, "max_bytes": 2**63 - 1, "max_age_seconds": 60,
                                "overflow": "reject_publish", "dead_letter_exchange": "dlx",
                                "dead_letter_routing_key": "dead", "max_deliveries": 3, "ack_timeout_ms": 1})
    assert full.overflow is Overflow.REJECT_PUBLISH
    assert QueueSettings.parse(full.as_dict()) == full
    assert full.as_dict()["overflow"] == "reject_publish"  # a plain value, as stored


def test_absent_fields_keep_the_base() -> None:
    base = QueueSettings.parse({"max_messages": 10, "max_deliveries": 2})
    changed = QueueSettings.parse({"max_messages": None}, base)
    assert changed.max_messages is None and changed.max_deliveries == 2


@pytest.mark.parametrize(("body", "field"), [
    ({"max_messages": 0}, "max_messages"), ({"max_bytes": 2**63}, "max_bytes"),
    ({"max_age_seconds": 1.5}, "max_age_seconds"), ({"max_deliveries": True}, "max_deliveries"),
    ({"ack_timeout_ms": 0}, "ack_timeout_ms"), ({"ack_timeout_ms": 86_400_001}, "ack_timeout_ms"),
    ({"overflow": "drop_tail"}, "overflow"), ({"dead_letter_exchange": "bad/name"}, "dead_letter_exchange"),
    ({"dead_letter_routing_key": "k" * 256}, "dead_letter_routing_key"),
    ({"dead_letter_routing_key": 5}, "dead_letter_routing_key"),
])
def test_each_bad_field_is_named(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        QueueSettings.parse(body)


def test_the_default_exchange_may_take_dead_letters() -> None:
    assert QueueSettings.parse({"dead_letter_exchange": ""}).dead_letter_exchange == ""
    assert QueueSettings.parse({"dead_letter_exchange": "amq.default"}).dead_letter_exchange == "amq.default"


def test_pushers_run_inside_notify_until_stopped_and_never_inside_each_other() -> None:
    async def main() -> None:
        queue = Queue(1, "orders", QueueSettings())
        other = Queue(2, "dead", QueueSettings())
        calls: list[str] = []

        def first() -> None:
            calls.append("first")
            other.notify()  # a notify inside a push (a dead-letter): its pushers run after this one's
            assert calls == ["first"]

        stop_first = queue.push_to(first)
        queue.push_to(lambda: calls.append("second"))
        other.push_to(lambda: calls.append("other"))
        queue.notify()
        assert calls == ["first", "second", "other"]  # in the notifier's call, in order
        stop_first()
        calls.clear()
        queue.notify()
        assert calls == ["second"]

    asyncio.run(main())


def test_a_failing_pusher_is_logged_and_neither_stops_the_others_nor_the_notifier(
        caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(1, "orders", QueueSettings())
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    queue.push_to(broken)
    queue.push_to(lambda: calls.append("after"))
    queue.notify()  # does not raise: the publish that notified is stored already
    assert calls == ["after"]
    assert "delivering to a waiting consumer failed" in caplog.text
