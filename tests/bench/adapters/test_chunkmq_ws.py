"""The chunkmq-ws adapter against a real server: every body consumed through a window far smaller than
the count (the credit is refilled), and every message acknowledged at the end; JSON publish frames,
and binary ones in bulk phases; the streams read by the calling thread (reader_thread=False)."""

from __future__ import annotations

import time

import httpx
import pytest

from bench.adapters.chunkmq_ws import ChunkmqWsAdapter
from bench.peers.server import Endpoint


@pytest.mark.parametrize(("count", "bulk"), [(1, False), (257, False), (257, True)])
def test_round_trip_through_a_small_window_with_acks(endpoint: Endpoint, count: int, bulk: bool) -> None:
    queue = f"ws-adapter-{count}-{bulk}"
    bodies = [b"m%04d" % i for i in range(count)]
    with ChunkmqWsAdapter(endpoint, pull=10, bulk=bulk) as a:
        a.declare(queue)
        for i in range(0, len(bodies), 7):  # one frame per small batch, as W4's one message per publish
            a.produce(queue, bodies[i:i + 7])
        assert a.producer is not None and not a.producer.reader_thread  # its fastest setup (docs/client.md, Latency)
        got: list[bytes] = []
        assert a.consume(queue, len(bodies), time.monotonic() + 30, got.append) == len(bodies)
    assert got == bodies
    base = f"http://127.0.0.1:{endpoint.port}/api/v1/queues/{queue}"
    auth = {"Authorization": f"Bearer {endpoint.extra['token']}"}
    deadline = time.monotonic() + 10  # the last ack frame may still be on its way when the socket closes
    while (group := httpx.get(f"{base}/groups/bench", headers=auth).json())["ack_floor"] < len(bodies):
        assert time.monotonic() < deadline, group
        time.sleep(0.05)
    assert (group["ack_floor"], group["in_flight"]) == (len(bodies), 0)
