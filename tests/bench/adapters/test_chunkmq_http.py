"""The chunkmq-http adapter against a real server: JSON bodies, and binary batches in bulk phases (B)."""

from __future__ import annotations

import time

import httpx
import pytest

from bench.adapters.chunkmq_http import ChunkmqHttpAdapter
from bench.peers.server import Endpoint
from chunkmq.client import _batch


@pytest.mark.parametrize("bulk", [False, True])
def test_round_trip_of_every_body_with_acks(endpoint: Endpoint, bulk: bool) -> None:
    queue = f"adapter-{bulk}"
    bodies = [b"m%04d" % i for i in range(2500)]
    with ChunkmqHttpAdapter(endpoint, pull=1000, bulk=bulk) as a:
        a.declare(queue)
        for i in range(0, len(bodies), 1000):
            a.produce(queue, bodies[i:i + 1000])
        got: list[bytes] = []
        assert a.consume(queue, len(bodies), time.monotonic() + 30, got.append) == len(bodies)
    assert got == bodies
    base = f"http://127.0.0.1:{endpoint.port}/api/v1/queues/{queue}"
    group = httpx.get(f"{base}/groups/bench").json()
    assert (group["ack_floor"], group["in_flight"]) == (len(bodies), 0)


def test_bulk_phases_speak_binary_batches(endpoint: Endpoint) -> None:
    """A bulk publish sends a binary body and reads a binary answer; a bulk pull asks for one."""
    with ChunkmqHttpAdapter(endpoint, bulk=True) as a:
        a.declare("adapter-wire")
        sent: list[dict[str, str]] = []
        request = a.http.request

        def recording(*args: object, **kw: object) -> tuple[int, bytes]:
            sent.append(kw.get("headers") or {})  # type: ignore[arg-type]
            return request(*args, **kw)  # type: ignore[arg-type]

        a.http.request = recording  # type: ignore[method-assign]
        a.produce("adapter-wire", [b"x"] * 10)
        assert a.consume("adapter-wire", 10, time.monotonic() + 30) == 10
    assert sent[0] == {"content-type": _batch.MEDIA_TYPE, "accept": _batch.MEDIA_TYPE}
    assert sent[1] == {"accept": _batch.MEDIA_TYPE}
