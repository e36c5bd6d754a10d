"""The synchronous client against a real server, one call of the API after another."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chunkmq import (
    Client,
    ConnectionFailed,
    InvalidRequest,
    Message,
    NotFound,
    OutgoingMessage,
    PreconditionFailed,
    Unauthorized,
    Unroutable,
)
from chunkmq.client import _batch
from tests.broker.test_message import binary_body
from tests.server import ServerProcess, free_port


def test_every_call(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        ex = mq.declare_exchange(f"{name}-x", "topic")
        assert (ex.name, ex.type) == (f"{name}-x", "topic")
        assert mq.declare_exchange(f"{name}-x", "topic").type == "topic"  # identical redeclare
        assert mq.exchange(f"{name}-x").messages_in == 0
        assert f"{name}-x" in {e.name for e in mq.exchanges()}
        assert mq.exchange("").type == "direct"  # the default exchange

        q = mq.declare_queue(name, ack_timeout_ms=60_000)
        assert (q.name, q.messages, q.groups) == (name, 0, [])
        assert mq.update_queue(name, max_messages=1000).raw["max_messages"] == 1000
        assert name in {q.name for q in mq.queues()}
        binding = mq.bind(f"{name}-x", name, "orders.*")
        assert (binding.exchange, binding.queue, binding.routing_key) == (f"{name}-x", name, "orders.*")
        assert [b.id for b in mq.bindings(queue=name)] == [binding.id]

        before = int(time.time() * 1000)
        published = mq.publish(f"{name}-x", [
            "text",
            b"\x00\x01binary",
            OutgoingMessage("full", headers={"k": "v"}, tag="t1", idempotency_key=f"{name}-k"),
            OutgoingMessage("own key", routing_key="orders.us"),
        ], routing_key="orders.eu")
        assert published.durability == "interval"
        assert [r.routed[0].offset for r in published.results] == [0, 1, 2, 3]
        assert mq.publish(f"{name}-x", [OutgoingMessage("full", routing_key="orders.eu",
                                                        idempotency_key=f"{name}-k")]).results[0].duplicate
        direct = mq.publish_to_queue(name, ["straight in"])
        assert direct.results[0].routed[0].queue == name

        page = mq.browse(name, offset=0, limit=10)
        assert [m.body for m in page.messages] == ["text", b"\x00\x01binary", "full", "own key", "straight in"]
        assert page.next_offset == 5
        full = page.messages[2]
        assert (full.headers, full.tag, full.routing_key, full.exchange) == ({"k": "v"}, "t1", "orders.eu", f"{name}-x")
        assert page.messages[1].data == b"\x00\x01binary"
        assert mq.browse(name, timestamp=before, limit=1).messages[0].offset == 0
        fetched = mq.message(published.results[0].id)
        assert isinstance(fetched, Message) and fetched.body == "text"

        group = mq.declare_group(name, "g", start="earliest")
        assert (group.name, group.lag) == ("g", 5)
        pulled = mq.pull(name, "g", max_messages=3, consumer="c1")
        assert [m.offset for m in pulled] == [0, 1, 2] and pulled[0].delivery_count == 1
        assert mq.ack(name, "g", [0]).ack_floor == 1
        assert mq.ack(name, "g", up_to=2).ack_floor == 2
        nacked = mq.nack(name, "g", [2])
        assert (nacked.nacked, nacked.exhausted) == (1, 0)
        again = mq.pull(name, "g", max_messages=1, wait_ms=1000)
        assert [(m.offset, m.delivery_count) for m in again] == [(2, 2)]
        rejected = mq.nack(name, "g", [2], requeue=False)  # no dead-letter exchange: dropped
        assert (rejected.nacked, rejected.exhausted, mq.group(name, "g").ack_floor) == (1, 1, 3)
        assert mq.seek(name, "g", to="latest").next_offset == 5
        assert mq.seek(name, "g", offset=1).ack_floor == 1
        assert mq.seek(name, "g", timestamp=before).ack_floor == 0
        info = mq.group(name, "g")
        assert (info.ack_floor, info.in_flight, info.consumers) == (0, 0, ["c1", "default"])
        assert [g.name for g in mq.groups(name)] == ["g"]
        assert mq.pull(name, "g", 1, wait_ms=0) and mq.queue(name).groups[0].in_flight == 1
        paused = mq.pause(name, "g")
        assert (paused.paused, paused.paused_until_ms) == (True, None)
        assert mq.pull(name, "g", 5, wait_ms=0) == []
        until = int(time.time() * 1000) + 60_000
        assert mq.pause(name, "g", until_ms=until).paused_until_ms == until
        resumed = mq.resume(name, "g")
        assert not resumed.paused and mq.pull(name, "g", 1, wait_ms=0)
        single = mq.declare_group(name, "g", single_active_consumer=True)
        assert single.single_active_consumer and single.active_consumer is None
        mq.pull(name, "g", 1, wait_ms=0, consumer="c1")
        assert mq.pull(name, "g", 1, wait_ms=0, consumer="c2") == []  # c1 is the active one
        assert mq.group(name, "g").active_consumer == "c1"
        mq.delete_group(name, "g")

        assert mq.overview()
        assert mq.purge(name) == 5
        mq.unbind(binding.id)
        assert mq.bindings(queue=name) == []
        mq.delete_queue(name)
        mq.delete_exchange(f"{name}-x", if_unused=True)
        with pytest.raises(NotFound) as missing:
            mq.queue(name)
        assert (missing.value.code, missing.value.status) == ("queue_not_found", 404)


def test_errors_are_typed_and_carry_the_api_code(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        with pytest.raises(PreconditionFailed) as conflict:
            mq.declare_queue(name, max_messages=5)
        assert conflict.value.code == "precondition_failed" and conflict.value.message
        with pytest.raises(InvalidRequest) as bad:
            mq.declare_queue("no spaces")
        assert bad.value.code == "invalid_name"
        with pytest.raises(Unroutable):
            mq.publish("", ["x"], routing_key="no-such-queue", mandatory=True)
        with pytest.raises(NotFound) as gone:
            mq.ack(name, "nobody", up_to=1)
        assert gone.value.code == "group_not_found"
        with pytest.raises(ValueError):
            mq.seek(name, "g", to="latest", offset=3)
    with Client(f"http://127.0.0.1:{free_port()}") as nowhere, pytest.raises(ConnectionFailed):
        nowhere.queues()


def test_a_str_or_bytes_is_one_message_and_anything_else_not_a_batch_is_refused(
    shared_server: ServerProcess, name: str
) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        assert len(mq.publish("", "single", routing_key=name).results) == 1
        assert len(mq.publish_to_queue(name, b"\x00\x01").results) == 1
        assert len(mq.publish_to_queue(name, ["a", "b"]).results) == 2
        with pytest.raises(TypeError):
            mq.publish_to_queue(name, 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            mq.publish_to_queue(name, {"x"})  # type: ignore[arg-type]
        assert [m.body for m in mq.browse(name).messages] == ["single", b"\x00\x01", "a", "b"]


def test_url_and_token_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secured = ServerProcess(tmp_path / "data").start()
    try:
        monkeypatch.setenv("CHUNKMQ_URL", secured.url)
        with Client() as anonymous, pytest.raises(Unauthorized):
            anonymous.queues()
        monkeypatch.setenv("CHUNKMQ_TOKEN", (secured.data_dir / "admin-token").read_text().strip())
        with Client() as mq:
            assert mq.url == secured.url
            mq.declare_queue("from-env")
            assert [q.name for q in mq.queues()] == ["from-env"]
    finally:
        secured.stop()


def test_a_binary_pull_of_queue_publishes_has_empty_keys_no_tags_and_the_json_ids(
        shared_server: ServerProcess, name: str) -> None:
    """Published straight to the queue: no exchange, routing key, tag or headers in the whole batch."""
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        mq.publish_to_queue(name, ["a", b"\x00b", "c"], binary=True)
        as_json = mq.browse(name, limit=10).messages
        pulled = mq.pull(name, "g", 10, binary=True)
    assert pulled == [Message(m.queue, m.offset, m.id, m.timestamp, "", "", {}, None, m.body, 1) for m in as_json]
    assert [m.body for m in pulled] == ["a", b"\x00b", "c"] and len({m.id for m in pulled}) == 3
    assert pulled[0].headers is not pulled[1].headers  # each message its own dict


def test_binary_batches_publish_and_pull_the_same_messages_as_json(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        batch = ["text", b"\x00\xffbytes", OutgoingMessage("routed", routing_key=name), "ünï"]
        published = mq.publish("", batch, routing_key=name, binary=True)
        assert len(published) == 4 and [r.routed[0].offset for r in published.results] == [0, 1, 2, 3]
        assert mq.publish_to_queue(name, "one more", binary=True).results[0].routed[0].offset == 4
        mq.publish("", [OutgoingMessage("json", routing_key=name, headers={"k": "v"}, tag="t")])
        as_json = mq.browse(name, limit=10).messages
        first = mq.pull(name, "g", 3, binary=True)
        rest = mq.pull(name, "g", 10, ack_up_to=first[-1].offset + 1, binary=True)
        assert first + rest == [Message(m.queue, m.offset, m.id, m.timestamp, m.routing_key, m.exchange, m.headers,
                                        m.tag, m.body, 1) for m in as_json]
        assert rest[-1].headers == {"k": "v"} and rest[-1].tag == "t"
        assert mq.group(name, "g").ack_floor == 3
        assert mq.pull(name, "g", 10, ack_up_to=6, binary=True) == []
        assert _batch.encode(["a", b"b"], "k") == binary_body((b"k", b"a", 0), (b"k", b"b", 1))  # docs/api.md
        with pytest.raises(ValueError, match="JSON"):
            mq.publish("", [OutgoingMessage("x", tag="t")], binary=True)
        with pytest.raises(TypeError):
            mq.publish("", [{"body": "a dict"}], binary=True)
        with pytest.raises(Unroutable):
            mq.publish("", ["x"], routing_key="nowhere", mandatory=True, binary=True)


def test_pull_batch_gives_the_messages_of_a_binary_pull_as_columns(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        mq.publish("", ["text", b"\x00bytes", OutgoingMessage("ünï", routing_key=name)], routing_key=name, binary=True)
        mq.publish("", [OutgoingMessage("json", routing_key=name, headers={"k": "v"}, tag="t")])
        as_json = mq.browse(name, limit=10).messages
        first = mq.pull_batch(name, "g", 2)
        assert len(first) == 2 and first.next_offset == 2
        assert first.bodies == ["text", b"\x00bytes"] and first.offsets == [0, 1] and first.delivery_counts == [1, 1]
        rest = mq.pull_batch(name, "g", 10, ack_up_to=first.next_offset)
        assert rest.routing_keys == [name, name] and rest.tags == [None, "t"] and rest.headers == [{}, {"k": "v"}]
        assert first.messages() + rest.messages() == [
            Message(m.queue, m.offset, m.id, m.timestamp, m.routing_key, m.exchange, m.headers, m.tag, m.body, 1)
            for m in as_json]
        assert first.ids == [m.id for m in as_json[:2]] and first.timestamps == [m.timestamp for m in as_json[:2]]
        assert mq.group(name, "g").ack_floor == 2
        empty = mq.pull_batch(name, "g", 10, ack_up_to=rest.next_offset)
        assert len(empty) == 0 and empty.next_offset is None and empty.messages() == []


def test_json_bodies_and_message_specs_are_never_confused(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        # a dict is refused with how to say either thing, and nothing is published
        for wrong in ({"order": 17}, [{"order": 17}], [{"body": "looks like a spec"}]):
            with pytest.raises(TypeError, match=r"json=.*OutgoingMessage"):
                mq.publish("", wrong, routing_key=name)  # type: ignore[arg-type]
        # a JSON body: json= (one message), or OutgoingMessage(json=...) in a batch, with its fields
        mq.publish("", json={"order": 17}, routing_key=name)
        mq.publish_to_queue(name, json=[1, "two", None])
        mq.publish("", [OutgoingMessage(json={"order": 18}, headers={"type": "order"}, tag="eu"),
                        OutgoingMessage(json=None), OutgoingMessage("plain text")], routing_key=name)
        mq.publish("", json="a JSON string", routing_key=name, binary=True)
        messages = mq.pull(name, "g", 10)
        assert [m.body for m in messages] == ['{"order":17}', '[1,"two",null]', '{"order":18}', "null", "plain text",
                                              '"a JSON string"']
        assert [m.json() for m in messages[:4]] == [{"order": 17}, [1, "two", None], {"order": 18}, None]
        assert (messages[2].headers, messages[2].tag) == ({"type": "order"}, "eu")
        with pytest.raises(ValueError):
            messages[4].json()  # not JSON
        with pytest.raises(TypeError, match="not both"):
            mq.publish("", "body", json={"a": 1}, routing_key=name)
        with pytest.raises(TypeError, match="json=value"):
            mq.publish("", routing_key=name)
        with pytest.raises(TypeError, match="JSON"):
            mq.publish("", json={"when": object()}, routing_key=name)
        with pytest.raises(ValueError, match="not both"):
            OutgoingMessage("body", json=1)
        assert mq.queue(name).messages == 6


def test_consume_iterates_with_credit_refill_auto_acks_and_hands_back_on_an_exception(
        shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name, ack_timeout_ms=60_000)
        mq.publish("", [str(i) for i in range(300)], routing_key=name)
        seen = []
        with mq.consume(name, "g", credit=16) as stream:
            for message in stream:
                seen.append(int(message.body))
                if len(seen) == 300:
                    break  # the message it was on counts as done
        assert seen == list(range(300))
        info = mq.group(name, "g")
        assert (info.ack_floor, info.in_flight, info.lag) == (300, 0, 0)

        mq.publish("", ["a", "b", "c"], routing_key=name)
        with pytest.raises(RuntimeError), mq.consume(name, "g", credit=10) as stream:
            for message in stream:
                if message.body == "b":
                    raise RuntimeError("cannot handle b")
        # a was done; b failed and c was never looked at: both back at once, not after the ack timeout
        with mq.consume(name, "g", credit=10, auto_ack=False) as manual:
            again = [next(manual), next(manual)]
            assert [(m.body, m.delivery_count) for m in again] == [("b", 2), ("c", 2)]
            manual.ack([again[0]])
            manual.nack([again[1]])
            redelivered = next(manual)
            assert (redelivered.body, redelivered.delivery_count) == ("c", 3)
            manual.ack([redelivered])
        info = mq.group(name, "g")
        assert (info.ack_floor, info.in_flight) == (303, 0)


@pytest.mark.parametrize("reader_thread", [True, False])
def test_consume_resumes_after_a_server_restart_and_stops_on_a_refusal(server: ServerProcess, name: str,
                                                                       reader_thread: bool) -> None:
    total = 1000
    with Client(server.url) as mq:
        mq.declare_queue(name)
        mq.publish("", [str(i) for i in range(total)], routing_key=name)
        seen: set[str] = set()
        with mq.consume(name, "g", credit=100, reader_thread=reader_thread) as stream:
            for message in stream:
                seen.add(message.body)  # type: ignore[arg-type]
                if len(seen) == total // 2 and not stream.reconnects:
                    server.restart()
                if len(seen) == total:
                    break
            assert stream.reconnects >= 1
        assert seen == {str(i) for i in range(total)}  # at least once: none lost
        assert mq.group(name, "g").lag == 0
        with pytest.raises(RuntimeError, match="with"):  # not opened: a clear error, not a hang or an assert
            next(mq.consume(name, "g"))
        # a refusal is not retried: the typed error, at once
        with (pytest.raises(NotFound),
              mq.consume(f"{name}-none", "g", retry_for=5, reader_thread=reader_thread) as stream):
            next(stream)


CTRL_C_WORKER = """
import sys, time
from chunkmq import Client

with Client(sys.argv[1]) as mq, mq.consume(sys.argv[2], "g", credit=10) as stream:
    for message in stream:
        print(message.body, flush=True)
        if message.body == "slow":
            time.sleep(60)  # Ctrl-C comes while the loop body works on it
"""


def test_ctrl_c_in_a_sync_worker_hands_its_messages_back_at_once(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name, ack_timeout_ms=600_000)  # not redelivered by the timeout within the test
        for bodies, expect_floor in ((["done"], 1), (["slow", "unseen"], 1)):
            mq.publish("", bodies, routing_key=name)
            worker = subprocess.Popen([sys.executable, "-c", CTRL_C_WORKER, shared_server.url, name],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == bodies[0]
            time.sleep(0.5)  # waiting for the next message (first round) or in the loop body (second)
            worker.send_signal(signal.SIGINT)
            _, err = worker.communicate(timeout=30)
            assert "KeyboardInterrupt" in err
            info = mq.group(name, "g")
            assert (info.ack_floor, info.in_flight) == (expect_floor, 0), err
        # "slow" failed and "unseen" was never looked at: both ready again, without the ack timeout
        again = mq.pull(name, "g", 10)
        assert [(m.body, m.delivery_count) for m in again] == [("slow", 2), ("unseen", 2)]


@pytest.mark.parametrize("reader_thread", [True, False])
def test_the_blocking_producer_sends_unconfirmed_frames_again_after_a_server_restart(
        server: ServerProcess, name: str, reader_thread: bool) -> None:
    with Client(server.url) as mq:
        mq.declare_queue(name)
        with mq.producer("", idempotent=True, batch_size=50, reader_thread=reader_thread) as producer:
            assert producer.publish_batch(["first"], routing_key=name).results[0].routed[0].offset == 0
            server.restart()
            futures = [producer.send(f"m{i}", routing_key=name) for i in range(200)]
            producer.flush()
            assert producer.reconnects >= 1
            assert sorted(f.result().routed[0].offset for f in futures) == list(range(1, 201))
        assert mq.queue(name).messages == 201  # keyed: a frame sent twice is stored once
        with pytest.raises(ConnectionFailed, match="closed"):
            producer.publish("after close", routing_key=name)


def test_queues_by_the_page(shared_server: ServerProcess, name: str) -> None:
    mine = [f"{name}-{i}" for i in range(5)]
    with Client(shared_server.url) as mq:
        for queue in mine:
            mq.declare_queue(queue)
        assert [q.name for q in mq.queues(limit=2, after=mine[0])] == mine[1:3]
        assert [q.name for q in mq.queues(after=mine[3])][:1] == mine[4:]
        every = [q.name for q in mq.iter_queues(page_size=2)]
        assert every == [q.name for q in mq.queues()] and [n for n in every if n.startswith(f"{name}-")] == mine
        with pytest.raises(InvalidRequest):
            mq.queues(limit=0)


def test_ttl_ms_makes_messages_expire_and_goes_as_json(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        q = mq.declare_queue(name, message_ttl_seconds=3600)
        assert q.raw["message_ttl_seconds"] == 3600
        mq.publish_to_queue(name, ["short", OutgoingMessage("own", ttl_ms=3_600_000)], ttl_ms=50)
        mq.publish("", OutgoingMessage("short too", ttl_ms=50), routing_key=name)
        with mq.producer("") as producer:
            producer.publish("streamed", routing_key=name, ttl_ms=50)
            producer.publish("kept", routing_key=name)
        with pytest.raises(ValueError, match="ttl_ms"):
            mq.publish_to_queue(name, ["x"], binary=True, ttl_ms=10)
        with pytest.raises(ValueError, match="JSON"):
            _batch.encode([OutgoingMessage("x", ttl_ms=10)])
        with pytest.raises(InvalidRequest, match="ttl_ms"):
            mq.publish_to_queue(name, ["x"], ttl_ms=0)
        time.sleep(0.1)
        got = mq.pull(name, "g", max_messages=10)
        assert [m.body for m in got] == ["own", "kept"] and "x-expires-at" in got[0].headers
        assert mq.queue(name).raw["expired"] == 3
