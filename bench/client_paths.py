"""The public Python client's fast paths against redis-py with hiredis, same run, same machine.

    .venv/bin/python -m bench.client_paths [--count 100000] [--rounds 2]

Starts a chunkmq server (fsync every 100 ms, the default) and a Redis server (appendfsync everysec),
then alternates rounds of: `chunkmq.Client.publish_to_queue` of batches of 100 text bodies of 100 B
and `Client.producer("").publish_batch` of the same over the WebSocket stream, against redis-py's
XADD pipelines of 100; `Client.pull(queue, group, 1000)` (each pull carrying the
previous batch's ack, `ack_up_to`, the last one acked with `Client.ack`) and `Client.pull_batch` the
same way, `Client.consume` (credit 1,000, acked as it goes) and its `batches()` (a cumulative
`ack_up_to` per batch), against XREADGROUP COUNT 1000 + XACK of the batch. Prints msgs/s and client CPU µs per
message, one JSON line per measurement, with the load average beside each.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import redis

from bench.peers.chunkmq import ChunkmqServer
from bench.peers.redis import RedisServer
from chunkmq import Client

BODY = "chunkmq-bench-" * 7 + "chunkmq-bench-"[:2]  # 100 B of ASCII text
BATCH = 100
PULL = 1000


def chunkmq_publish(mq: Client, queue: str, count: int) -> None:
    batch = [BODY] * BATCH
    for _ in range(count // BATCH):
        mq.publish_to_queue(queue, batch)


def chunkmq_produce(mq: Client, queue: str, count: int) -> None:
    batch = [BODY] * BATCH
    with mq.producer("") as producer:
        for _ in range(count // BATCH):
            producer.publish_batch(batch, routing_key=queue)


def chunkmq_consume(mq: Client, queue: str, count: int) -> None:
    with mq.consume(queue, "g3", credit=PULL) as stream:
        for n, _message in enumerate(stream, 1):
            if n == count:
                break


def chunkmq_consume_batches(mq: Client, queue: str, count: int) -> None:
    got = 0
    with mq.consume(queue, "g4", credit=PULL, auto_ack=False) as stream:
        for batch in stream.batches(max_messages=count - got):
            for m in batch:
                _ = m.body  # what a consumer reads
            stream.ack_up_to(batch[-1].offset + 1)
            got += len(batch)
            if got >= count:
                break


def chunkmq_pull(mq: Client, queue: str, count: int) -> None:
    got, done = 0, None
    while got < count:
        messages = mq.pull(queue, "g", PULL, ack_up_to=done)
        for m in messages:
            _ = m.body  # what a consumer reads
        done = messages[-1].offset + 1
        got += len(messages)
    mq.ack(queue, "g", up_to=done)


def chunkmq_pull_batch(mq: Client, queue: str, count: int) -> None:
    got, done = 0, None
    while got < count:
        batch = mq.pull_batch(queue, "g2", PULL, ack_up_to=done)
        for body in batch.bodies:
            _ = body  # what a consumer reads
        done = batch.next_offset
        got += len(batch)
    mq.ack(queue, "g2", up_to=done)


def redis_publish(r: redis.Redis, queue: str, count: int) -> None:
    body = BODY.encode()
    for _ in range(count // BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.xadd(queue, {b"b": body})
        pipe.execute()


def redis_pull(r: redis.Redis, queue: str, count: int) -> None:
    got = 0
    while got < count:
        entries = r.xreadgroup("g", "c1", {queue: ">"}, count=PULL)[0][1]
        for _id, fields in entries:
            _ = fields[b"b"]  # what a consumer reads
        r.xack(queue, "g", *[entry_id for entry_id, _ in entries])
        got += len(entries)


def timed(what: str, count: int, run: Callable[..., None], *args: Any) -> dict[str, object]:
    load = os.getloadavg()[0]
    cpu, wall = time.process_time(), time.perf_counter()
    run(*args)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {"what": what, "msgs_per_s": round(count / wall), "client_cpu_us_per_msg": round(cpu / count * 1e6, 2),
           "load": round(load, 1)}
    print(orjson.dumps(row).decode(), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    count = args.count // PULL * PULL
    with tempfile.TemporaryDirectory(prefix="client-paths-") as tmp:
        servers = [ChunkmqServer(Path(tmp) / "chunkmq"), RedisServer(Path(tmp) / "redis")]
        try:
            for server in servers:
                server.start()
            mine = servers[0].endpoint()
            mq = Client(f"http://127.0.0.1:{mine.http_port}", token=mine.extra["token"])
            r = redis.Redis(host="127.0.0.1", port=servers[1].endpoint().port)
            for n in range(args.rounds):
                queue = f"paths-{n}"
                mq.declare_queue(queue)
                mq.declare_group(queue, "g")
                mq.declare_group(queue, "g2")
                mq.declare_queue(queue + "-ws")
                r.xgroup_create(queue, "g", id="0", mkstream=True)
                timed("chunkmq Client.publish_to_queue, batches of 100", count, chunkmq_publish, mq, queue, count)
                timed("chunkmq Client.producer publish_batch of 100 (WebSocket)", count, chunkmq_produce, mq,
                      queue + "-ws", count)
                timed("redis-py XADD pipeline of 100", count, redis_publish, r, queue, count)
                timed("chunkmq Client.pull 1,000 + ack", count, chunkmq_pull, mq, queue, count)
                timed("chunkmq Client.pull_batch 1,000 + ack", count, chunkmq_pull_batch, mq, queue, count)
                timed("chunkmq Client.consume, credit 1,000, acked as it goes (WebSocket)", count, chunkmq_consume, mq,
                      queue + "-ws", count)
                timed("chunkmq Client.consume batches, credit 1,000, ack_up_to per batch (WebSocket)", count,
                      chunkmq_consume_batches, mq, queue + "-ws", count)
                timed("redis-py XREADGROUP 1,000 + XACK", count, redis_pull, r, queue, count)
                mq.delete_queue(queue, force=True)
                mq.delete_queue(queue + "-ws", force=True)
                r.delete(queue)
            mq.close()
            r.close()
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
