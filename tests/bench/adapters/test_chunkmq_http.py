"""The chunkmq-http adapter against a real server, through the public client only."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import httpx
import pytest

import chunkmq.client
from bench.adapters import chunkmq_http, chunkmq_ws
from bench.adapters.chunkmq_http import ChunkmqHttpAdapter
from bench.peers.server import Endpoint


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
    auth = {"Authorization": f"Bearer {endpoint.extra['token']}"}
    group = httpx.get(f"{base}/groups/bench", headers=auth).json()
    assert (group["ack_floor"], group["in_flight"]) == (len(bodies), 0)


def test_the_chunkmq_adapters_use_only_the_public_client() -> None:
    """As every peer is driven through its public client library: from chunkmq, only the names
    `chunkmq` exports (docs/client.md), nothing of the client's private modules or the wire codec."""
    for module in (chunkmq_http, chunkmq_ws):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("chunkmq") for a in node.names), ast.unparse(node)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chunkmq"):
                assert node.module == "chunkmq", ast.unparse(node)
                assert {a.name for a in node.names} <= set(chunkmq.client.__all__), ast.unparse(node)
