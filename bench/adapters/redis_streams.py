"""Redis Streams with redis-py and the hiredis reply parser: XADD in pipelines, XREADGROUP + XACK for
the group `bench`.

hiredis (the C parser, `redis[hiredis]` in the bench extra) more than doubles what the pure-Python
parser consumes; redis-py falls back to the slow parser silently when hiredis is missing, so `open`
checks the parser of a live connection and refuses to measure without it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib.metadata import version

import redis

from bench.adapters.base import Adapter, ConsumeTimeout, OnBody
from bench.peers.server import Endpoint

GROUP = b"bench"
FAST_PARSER = "_HiredisParser"


def parser_in_use(client: redis.Redis) -> str:
    """The reply parser class of one of `client`'s connections, after a PING over it."""
    pool = client.connection_pool
    conn = pool.get_connection("PING")
    try:
        conn.send_command("PING")
        conn.read_response()
        return type(conn._parser).__name__
    finally:
        pool.release(conn)


class RedisStreamsAdapter(Adapter):
    name = "redis"
    server = "redis"
    setup = (f"redis-py {version('redis')} with the hiredis parser; pipelines of XADD (no MULTI), "
             "XREADGROUP COUNT pull then XACK of the batch")

    @classmethod
    def describe(cls, endpoint: Endpoint) -> str:
        client = redis.Redis(host="127.0.0.1", port=endpoint.port)
        try:
            parser = parser_in_use(client)
        finally:
            client.close()
        hiredis = version("hiredis") if parser == FAST_PARSER else "NOT in use"
        return f"{cls.setup} (parser in use: {parser}, hiredis {hiredis})"

    def open(self) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=self.endpoint.port)
        parser = parser_in_use(self.client)
        if parser != FAST_PARSER:
            self.client.close()
            raise RuntimeError(f"redis: reply parser {parser}, not hiredis (pip install 'redis[hiredis]')")

    def close(self) -> None:
        self.client.close()

    def declare(self, queue: str) -> None:
        try:
            self.client.xgroup_create(queue, GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def delete(self, queue: str) -> None:
        self.client.delete(queue)

    def produce(self, queue: str, bodies: Sequence[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for body in bodies:
            pipe.xadd(queue, {b"b": body})
        pipe.execute()

    def consume(self, queue: str, n: int, deadline: float, on_body: OnBody | None = None) -> int:
        got = 0
        while got < n:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise ConsumeTimeout(f"redis: {got}/{n} messages before the deadline")
            reply = self.client.xreadgroup(GROUP, b"c1", {queue: b">"}, count=min(self.pull, n - got),
                                           block=min(left_ms, 1000))
            if not reply:
                continue
            entries = reply[0][1]
            if on_body is not None:
                for _id, fields in entries:
                    on_body(fields[b"b"])
            self.client.xack(queue, GROUP, *[entry_id for entry_id, _ in entries])
            got += len(entries)
        return got
