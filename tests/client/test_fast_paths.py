"""The client's fast paths end to end against a real broker: publishes of plain bodies go as binary
batches by themselves, pulls come back as binary batches built into Messages from columns, the next
pull carries the ack, the blocking consumer takes buffered messages without a trip to its thread,
and the blocking producer sends plain batches as binary frames."""

from __future__ import annotations

import time

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
