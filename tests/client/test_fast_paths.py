"""The client's fast paths end to end against a real broker: publishes of plain bodies go as binary
batches by themselves, pulls come back as binary batches built into Messages from columns, the next
pull carries the ack, the blocking consumer takes buffered messages without a trip to its thread,
the consumer hands over whole batches (next_batch), and the blocking producer sends plain batches as
binary frames."""

from __future__ import annotations

import time

import pytest

from chunkmq import Client, Message, OutgoingMessage
from chunkmq.client import _calls as calls
from tests.server import ServerProcess


def test_plain_batches_pick_the_binary_body_and_the_rest_json() -> None:
    assert calls.publish_to_queue("q", ["a", b"b", OutgoingMessage("c", routing_key="k")], False, None).batch
    for needs_json in ([OutgoingMessage("a", tag="t")], [OutgoingMessage("a", headers={"k": "v"})], []):
        call = calls.publish_to_queue("q", needs_json, False, None)
        assert call.batch is None and call.body is not None
    assert calls.publish_to_queue("q", ["a"], False, False).batch is None
    assert calls.pull("q", "g", 10, 0, "c", None, True).binary_answer


def test_publish_pull_consume_and_ack_on_the_fast_paths(shared_server: ServerProcess, name: str) -> None:
    total = 3000
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
        for start in range(0, total, 100):
            assert len(mq.publish_to_queue(name, [f"m{i}" for i in range(start, start + 100)])) == 100
        # pull: Messages (named tuples over the binary batch's columns); the next pull acks the last
        first = mq.pull(name, "pull", 1000)
        assert isinstance(first[0], Message) and first[0].body == "m0" and first[-1].offset == 999
        assert first[5] == mq.browse(name, offset=5, limit=1).messages[0]._replace(delivery_count=1)
        batch = mq.pull_batch(name, "pull", 1000, ack_up_to=first[-1].offset + 1)
        assert batch.bodies[0] == "m1000" and mq.group(name, "pull").ack_floor == 1000
        mq.pull_batch(name, "pull", 1000, ack_up_to=batch.next_offset)
        assert mq.ack(name, "pull", up_to=3000).ack_floor == 3000

        # consume: the blocking consumer, acks as it goes; next(timeout) gives None when nothing comes
        seen = []
        with mq.consume(name, "stream", credit=500) as stream:
            for message in stream:
                seen.append(message.body)
                if len(seen) == total:
                    break
            started = time.monotonic()
            assert stream.next(timeout=0.2) is None and time.monotonic() - started >= 0.15
        assert seen == [f"m{i}" for i in range(total)]
        assert mq.group(name, "stream").ack_floor == total

        # the blocking producer: binary frames for plain batches, JSON for the rest, pipelined sends
        with mq.producer("") as producer:
            assert len(producer.publish_batch(["p0", "p1"], routing_key=name)) == 2
            tagged = producer.publish_batch([OutgoingMessage("p2", tag="t")], routing_key=name)
            assert tagged.results[0].routed[0].offset == total + 2
            futures = [producer.send(f"s{i}", routing_key=name) for i in range(50)]
            assert [f.result(timeout=30).routed[0].offset for f in futures] == list(range(total + 3, total + 53))
        tail = mq.pull(name, "stream", 100, wait_ms=1000)
        assert [m.body for m in tail[:3]] == ["p0", "p1", "p2"] and tail[2].tag == "t" and len(tail) == 53


def test_consume_hands_over_batches_acked_as_a_whole(shared_server: ServerProcess, name: str) -> None:
    total = 2500
    with Client(shared_server.url) as mq:
        mq.declare_queue(name, ack_timeout_ms=60_000)
        for start in range(0, total, 500):
            mq.publish_to_queue(name, [f"b{i}" for i in range(start, start + 500)])
        sizes, seen = [], []
        with mq.consume(name, "batches", credit=1000) as stream:
            with pytest.raises(ValueError, match="max_messages"):
                stream.next_batch(max_messages=0)
            for batch in stream.batches(max_messages=300):
                assert all(isinstance(m, Message) for m in batch)
                sizes.append(len(batch))
                seen += [m.body for m in batch]
                if len(seen) == total:
                    break  # the batch it was on counts as done, as a message does
            started = time.monotonic()
            assert stream.next_batch(timeout=0.2) == [] and time.monotonic() - started >= 0.15
        assert seen == [f"b{i}" for i in range(total)] and max(sizes) <= 300 and len(sizes) < total / 10
        info = mq.group(name, "batches")
        assert (info.ack_floor, info.in_flight) == (total, 0)

        # a loop body that fails hands its whole batch back at once; the batches before it were done
        mq.publish_to_queue(name, ["x", "y", "z"])
        with pytest.raises(RuntimeError), mq.consume(name, "batches", credit=10) as stream:
            for batch in stream.batches():
                raise RuntimeError(f"cannot handle {len(batch)}")
        with mq.consume(name, "batches", credit=10, auto_ack=False) as manual:
            again = manual.next_batch(timeout=5)
            while len(again) < 3:  # handed back together, though a frame may cut them
                again += manual.next_batch(timeout=5)
            assert [(m.body, m.delivery_count) for m in again] == [("x", 2), ("y", 2), ("z", 2)]
            manual.ack_up_to(again[-1].offset + 1)
        assert mq.group(name, "batches").ack_floor == total + 3
