"""Large publishes (encoded column by column, app/storage/record_encode.py encode_columns) through the
broker: routed to several queues, with tags and idempotency keys, JSON and binary, read back after
a restart. A real Broker on a temporary directory."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import QueueFull, TooLarge, Unroutable
from chunkmq.broker.message import decode_data
from chunkmq.broker.wake import Wake
from chunkmq.client import _batch
from chunkmq.config import FsyncSetting
from chunkmq.storage.record_encode import COLUMNS_MIN
from chunkmq.wire import batch as wire
from tests.broker.conftest import with_broker

N = COLUMNS_MIN + 44


def _read(broker: Broker, queue: str) -> list[tuple[int, dict[str, object]]]:
    q = broker.queue(queue)
    return [(offset, decode_data(data, tag)) for offset, _, _, _, tag, data in broker.store.read(q.id, 0, 10 * N)]


def test_large_batches_are_stored_as_sent_routed_and_deduplicated(tmp_path: Path) -> None:
    async def publish(broker: Broker) -> list[bytes]:
        for name in ("a", "b"):
            await broker.declare_queue(name, {})
        await broker.declare_exchange("fan", {"type": "fanout"})
        for name in ("a", "b"):
            await broker.bind({"exchange": "fan", "queue": name, "routing_key": ""})
        answers = []
        # JSON through the exchange: both queues, every other message with a tag and a key
        messages = [{"body": f"m{i}", "routing_key": "k"} | ({"tag": "t", "idempotency_key": f"i{i}"} if i % 2 else {})
                    for i in range(N)]
        answers.append((await broker.publish("fan", messages)).results)
        answers.append((await broker.publish("fan", messages[1:2])).results)  # a repeated key
        # a binary batch straight into one queue, text and bytes bodies
        body = _batch.encode([f"x{i}" if i % 3 else f"y{i}".encode() for i in range(N)])
        answers.append((await broker.publish("", body, queue_name="a", binary_answer=True)).results)
        # the common batch: plain text, one queue
        plain = _batch.encode([f"p{i}" for i in range(N)])
        answers.append((await broker.publish("", plain, queue_name="b", binary_answer=True)).results)
        return answers

    json_results, repeat, binary_results, _ = with_broker(tmp_path, publish)
    results = orjson.loads(json_results)
    assert [r["routed"] for r in results[:2]] == [[{"queue": "a", "offset": 0}, {"queue": "b", "offset": 0}],
                                                  [{"queue": "a", "offset": 1}, {"queue": "b", "offset": 1}]]
    assert orjson.loads(repeat)[0] == results[1] | {"duplicate": True}
    (stored,) = _batch.COUNT.unpack_from(binary_results)
    assert stored == N

    def check(broker: Broker) -> None:  # after a restart: recovery, CRC-checked reads
        a, b = _read(broker, "a"), _read(broker, "b")
        assert [o for o, _ in a] == list(range(2 * N)) and [o for o, _ in b] == list(range(2 * N))
        assert [m["body"] for _, m in b] == [f"m{i}" for i in range(N)] + [f"p{i}" for i in range(N)]
        assert [m["tag"] for _, m in b[:3]] == [None, "t", None] and b[0][1]["routing_key"] == "k"
        assert [m.get("body", m.get("body_base64")) for _, m in a[N:N + 3]] == ["eTA=", "x1", "x2"]

    async def reopen(broker: Broker) -> None:
        check(broker)

    with_broker(tmp_path, reopen)


def test_a_single_message_is_answered_counted_and_limited_as_in_a_batch(tmp_path: Path) -> None:
    """A publish of one plain message into one queue takes its own path (Publishing._publish_one):
    the same answer as the first message of a batch, the same counters, limits and errors; one
    that does not go to exactly one queue takes the batch path."""

    async def publish(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.declare_queue("dropping", {"max_messages": 2})
        await broker.declare_queue("refusing", {"max_messages": 1, "overflow": "reject_publish"})
        await broker.declare_queue("other", {})
        await broker.declare_exchange("fan", {"type": "fanout"})
        for name in ("q", "other"):
            await broker.bind({"exchange": "fan", "queue": name, "routing_key": ""})
        one = orjson.loads((await broker.publish("", [{"body": "a"}], queue_name="q")).results)
        two = orjson.loads((await broker.publish("", [{"body": "b"}, {"body": "c"}], queue_name="q")).results)
        assert [r["routed"] for r in one + two] == [[{"queue": "q", "offset": o}] for o in range(3)]
        assert [sorted(r) for r in one] == [sorted(two[0])] and int(one[0]["id"], 16) < int(two[0]["id"], 16)
        # through the default exchange by routing key: one queue, the same path and answer
        routed = orjson.loads((await broker.publish("", [{"body": "d", "routing_key": "q"}])).results)
        assert routed[0]["routed"] == [{"queue": "q", "offset": 3}]
        # through a fanout to two queues, and to none: the batch path
        fanned = orjson.loads((await broker.publish("fan", [{"body": "e"}])).results)
        assert fanned[0]["routed"] == [{"queue": "q", "offset": 4}, {"queue": "other", "offset": 0}]
        assert orjson.loads((await broker.publish("", [{"body": "f", "routing_key": "none"}])).results)[0][
            "routed"] == []
        with pytest.raises(Unroutable):
            await broker.publish("", [{"body": "g", "routing_key": "none"}], mandatory=True)
        with pytest.raises(TooLarge, match=r"messages\[0\] is larger than"):
            await broker.publish("", [{"body": "x" * (broker.settings.max_message_bytes + 1)}], queue_name="q")
        assert (broker.queue("q").messages_in, broker.exchange("").messages_in) == (5, 6)
        # limits: drop_head moves the first offset, reject_publish refuses and stores nothing
        for body in "hij":
            await broker.publish("", [{"body": body}], queue_name="dropping")
        assert (broker.store.first_offset(broker.queue("dropping").id), broker.queue("dropping").messages_in) == (1, 3)
        await broker.publish("", [{"body": "k"}], queue_name="refusing")
        end = broker.store.end_position
        with pytest.raises(QueueFull, match="queue 'refusing' holds 1 of at most 1 messages"):
            await broker.publish("", [{"body": "l"}], queue_name="refusing")
        assert broker.store.end_position == end and broker.queue("refusing").messages_in == 1
        assert [m["body"] for _, m in _read(broker, "q")] == ["a", "b", "c", "d", "e"]
        # a binary body of one message, answered in binary: the answer render_results gives a batch
        position = broker.store.end_position
        answer = (await broker.publish("", _batch.encode(["m"]), queue_name="q", binary_answer=True)).results
        assert answer == wire.encode_results([position], None, [5], b"\x01", b"q")
        batch = (await broker.publish("", _batch.encode(["n", "o"]), queue_name="q", binary_answer=True)).results
        assert wire.decode_results(answer).names == wire.decode_results(batch).names[:1] == [b"q"]

    with_broker(tmp_path, publish)


def test_a_single_message_of_bytes_takes_the_one_message_path_and_stores_what_a_batch_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A binary publish body of one message whose body is bytes (the client's publish of bytes) is
    stored by Store.publish_one, not append: the same blob and flags as that message in a batch, read
    back as body_base64; one with headers still takes the batch path."""

    async def publish(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        await broker.publish("", [{"body": "the first chunk"}], queue_name="q")  # (created by an append)
        appends: list[int] = []
        append = broker.store.append
        monkeypatch.setattr(broker.store, "append", lambda batch, *a: appends.append(len(batch)) or append(batch, *a))
        body = bytes(range(256))
        for binary_answer in (False, True):
            await broker.publish("", _batch.encode([body]), queue_name="q", binary_answer=binary_answer)
        assert appends == []
        await broker.publish("", _batch.encode([body, b"\xff"]), queue_name="q")
        await broker.publish("", [{"body_base64": "AP8=", "headers": {"h": "v"}}], queue_name="q")
        assert appends == [2, 1]
        stored = broker.store.read(broker.queue("q").id, 1, 10)
        assert [(flags, tag, data) for _, _, _, flags, tag, data in stored[:2]] == [stored[2][3:]] * 2
        assert [m.get("body_base64") for _, m in _read(broker, "q")[1:]] == [base64.b64encode(body).decode()] * 3 + [
            "/w==", "AP8="]

    with_broker(tmp_path, publish)


def test_in_fsync_always_a_publish_waits_for_a_wake_the_fsync_fires(tmp_path: Path) -> None:
    """begin_publish gives the wake to wait for (a publish of one message, and of a batch), fired on
    the loop once the log is fsynced past the publish; publish() returns only then."""

    async def work(broker: Broker) -> None:
        await broker.declare_queue("q", {})
        for messages in ([{"body": "one"}], [{"body": f"m{i}"} for i in range(5)]):
            outcome, wake = broker.begin_publish("", messages, queue_name="q")
            assert type(wake) is Wake and not wake.done() and outcome.durability == "fsync"
            end = broker.store.end_position
            await broker.durable(outcome, wake)
            assert broker.store._flusher.synced >= end
        await broker.publish("", [{"body": "last"}], queue_name="q")
        assert broker.store._flusher.synced >= broker.store.end_position
        assert [fields["body"] for _, fields in _read(broker, "q")] == ["one", *(f"m{i}" for i in range(5)), "last"]

    with_broker(tmp_path, work, fsync=FsyncSetting.ALWAYS)
