"""app/broker/expiry.py: when a stored message expires, and expiry on a real broker: never delivered
to a group that reaches it after its time, dead-lettered with reason `expired`, counted, and passed
as if acked (the group's floor moves over it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from chunkmq.broker.blob import encode_blob
from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.expiry import FLAG_EXPIRES, MAX_TTL_MS, MAX_TTL_SECONDS, Expiry, expires_at, own_expiry
from chunkmq.broker.message import UNBOUNDED, parse_message
from tests.broker.conftest import with_broker


def _blob(headers: dict[str, str] | None) -> bytes:
    return encode_blob(b"", b"k", orjson.dumps(headers) if headers else None, b"body", False)


def test_a_message_expires_at_the_earlier_of_its_own_time_and_its_queues() -> None:
    own = _blob({"x-expires-at": "5000"})
    assert own_expiry(own) == 5000 and own_expiry(_blob(None)) is None
    assert own_expiry(_blob({"x-expires-at": "soon"})) is None
    assert expires_at(1000, FLAG_EXPIRES, own, None) == 5000
    assert expires_at(1000, FLAG_EXPIRES, own, 2000) == 3000  # the queue's is sooner
    assert expires_at(1000, FLAG_EXPIRES, own, 9000) == 5000
    assert expires_at(1000, 0, own, None) is None  # without the flag the header is only a header
    assert expires_at(1000, 0, own, 10) == 1010


def test_keep_passes_expired_messages_with_their_counts() -> None:
    fresh, old = (0, 0, 900, FLAG_EXPIRES, b"", _blob({"x-expires-at": "2000"})), (1, 9, 100, 0, b"", _blob(None))
    plain = [(2, 18, 100, 0, b"", _blob(None))]
    expiry = Expiry(None, 1500)
    assert expiry.keep(plain, 0) is plain  # no ttl anywhere: nothing looked at
    assert expiry.keep([fresh, old], 0) == [fresh, old] and not expiry.expired
    later = Expiry(1000, 2500)
    assert later.keep([fresh, old], 3) == [] and later.expired == [(fresh, 3), (old, 3)]


def test_ttl_ms_is_validated_and_stored_as_a_header() -> None:
    before = time.time_ns() // 1_000_000
    out = parse_message({"body": "b", "ttl_ms": 1000, "headers": {"a": "b"}}, "", 0, UNBOUNDED)
    assert out.flags & FLAG_EXPIRES and out.headers["a"] == "b"
    assert before + 1000 <= int(out.headers["x-expires-at"]) <= time.time_ns() // 1_000_000 + 1000
    assert parse_message({"body": "b", "ttl_ms": None}, "", 0, UNBOUNDED).flags == 0
    assert parse_message({"body": "b", "ttl_ms": 5000.0}, "", 0, UNBOUNDED).flags & FLAG_EXPIRES  # JSON's 5000
    for bad in (0, -1, MAX_TTL_MS + 1, 1.5, "10", True):
        with pytest.raises(InvalidInput, match=r"messages\[3\]\.ttl_ms must be an integer from 1 to"):
            parse_message({"body": "b", "ttl_ms": bad}, "", 3, UNBOUNDED)


def _pull(got: bytes) -> list[dict[str, Any]]:
    return list(orjson.loads(got)["messages"])


def test_an_expired_message_is_not_delivered_but_dead_lettered_counted_and_passed(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_exchange("dlx", {"type": "fanout"})
        await broker.declare_queue("dead", {})
        await broker.bind({"exchange": "dlx", "queue": "dead", "routing_key": ""})
        await broker.declare_queue("src", {"dead_letter_exchange": "dlx"})
        await broker.declare_group("src", "early", {})
        await broker.publish("", [{"body": "short", "ttl_ms": 50}, {"body": "long", "ttl_ms": 60_000},
                                  {"body": "plain"}], queue_name="src")
        assert [m["body"] for m in _pull(await broker.pull("src", "early", 1, 0, "c"))] == ["short"]
        await broker.declare_group("src", "late", {})
        time.sleep(0.08)
        got = _pull(await broker.pull("src", "late", 10, 0, "c"))
        assert [m["body"] for m in got] == ["long", "plain"]
        assert "x-expires-at" in got[0]["headers"]
        late = broker.queue("src").groups["late"]
        assert late.expired == 1 and broker.queue("src").expired == 1 and broker.stats.expired == 1
        broker.ack("src", "late", {"offsets": [1, 2]})
        assert late.ack_floor == 3  # the expired one counts as done
        [dead] = _pull(broker.browse("dead", 0, None, 10))
        assert dead["body"] == "short" and dead["headers"]["x-death-reason"] == "expired"
        assert dead["headers"]["x-death-group"] == "late" and "x-expires-at" not in dead["headers"]
        # the group that had it in flight gets it again after a nack: it expired meanwhile, so no
        broker.nack("src", "early", {"offsets": [0]})
        assert _pull(await broker.pull("src", "early", 1, 0, "c"))[0]["body"] == "long"
        assert broker.queue("src").groups["early"].expired == 1 and broker.queue("src").expired == 2

    with_broker(tmp_path, work)


def test_the_queue_ttl_expires_messages_without_a_dead_letter_exchange(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {"message_ttl_seconds": 1})
        await broker.publish("", [{"body": str(i)} for i in range(300)], queue_name="q")
        assert broker.queue("q").settings.message_ttl_seconds == 1
        time.sleep(1.05)
        await broker.publish("", [{"body": "new"}], queue_name="q")
        for binary in (False, True):  # the column path (300 messages) must not hand the old ones out
            await broker.declare_group("q", f"g{binary}", {})
            got = await broker.pull("q", f"g{binary}", 1000, 0, "c", binary=binary)
            if not binary:
                assert [m["body"] for m in _pull(got)] == ["new"]
            group = broker.queue("q").groups[f"g{binary}"]
            assert group.expired == 300 and len(group.in_flight) == 1 and group.ack_floor == 300
        assert broker.queue("q").expired == 600 and broker.queue("q").messages_dropped == 0

    with_broker(tmp_path, work)


def test_message_ttl_seconds_is_validated_updated_and_kept(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        for bad in (0, MAX_TTL_SECONDS + 1, "5", 1.0, False):
            with pytest.raises(InvalidInput, match="message_ttl_seconds must be an integer from 1 to"):
                await broker.declare_queue("q", {"message_ttl_seconds": bad})
        await broker.declare_queue("q", {"message_ttl_seconds": 60})
        await broker.update_queue("q", {"message_ttl_seconds": 30})
        assert broker.queue("q").settings.message_ttl_ms == 30_000

    with_broker(tmp_path, work)

    async def reopened(broker: Broker) -> None:
        assert broker.queue("q").settings.message_ttl_seconds == 30

    with_broker(tmp_path, reopened)


def test_tag_filtered_groups_and_redeliveries_after_a_restart_pass_expired_messages(tmp_path: Path) -> None:
    async def first(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": "in flight", "ttl_ms": 300}, {"body": "t-gone", "tag": "t", "ttl_ms": 1},
                                  {"body": "other", "tag": "u"}, {"body": "t-kept", "tag": "t"}], queue_name="q")
        assert [m["body"] for m in _pull(await broker.pull("q", "g", 1, 0, "c"))] == ["in flight"]
        await broker.declare_group("q", "tagged", {"tag_filter": ["t"]})
        time.sleep(0.01)
        assert [m["body"] for m in _pull(await broker.pull("q", "tagged", 10, 0, "c"))] == ["t-kept"]
        assert broker.queue("q").groups["tagged"].expired == 1
        await broker.commit_groups()

    with_broker(tmp_path, first)
    time.sleep(0.35)

    async def after(broker: Broker) -> None:
        group = broker.queue("q").groups["g"]
        assert 0 in group.pending  # delivered before the restart, not acked: due again
        got = [m["body"] for m in _pull(await broker.pull("q", "g", 10, 0, "c"))]
        assert got == ["other", "t-kept"]  # not "in flight" (expired since), nor "t-gone"
        assert group.expired == 2 and group.ack_floor == 2

    with_broker(tmp_path, after)
