"""The conformance suite (tests/http/conformance.py) with Python's clients against a real
`chunkmq serve` with auth on: http.client, httpx, aiohttp and websockets. Every hot route answers
each case as the ASGI path does."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import websockets
from yarl import URL

from tests.http.conformance import Broker, Sent, broker, comparable, compare_cases


@pytest.fixture(scope="module")
def chunkmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from broker(tmp_path_factory.mktemp("clients") / "data")


def test_http_client(chunkmq: Broker) -> None:
    """The standard library's http.client, every case on one connection."""
    queue = chunkmq.queue("http-client")
    connection = http.client.HTTPConnection("127.0.0.1", chunkmq.port, timeout=10)
    ports = set()

    def send(path: str, body: bytes, headers: dict[str, str]) -> Sent:
        connection.request("POST", path, body, headers)
        ports.add(connection.sock.getsockname()[1])
        answer = connection.getresponse()
        return comparable(answer.status, dict(answer.getheaders()), answer.read())

    try:
        compare_cases(chunkmq, queue, send)
    finally:
        connection.close()
    assert len(ports) == 1, ports  # one connection, kept alive throughout


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_httpx(chunkmq: Broker, chunked: bool) -> None:
    """httpx, every case in one client's pool (one connection); a body from an iterator goes chunked."""
    queue = chunkmq.queue(f"httpx-{chunked}")
    ports: set[Any] = set()

    with httpx.Client(base_url=chunkmq.url, timeout=10) as client:
        def send(path: str, body: bytes, headers: dict[str, str]) -> Sent:
            content: Any = iter([body[:5], body[5:]]) if chunked else body
            answer = client.post(httpx.URL(chunkmq.url + path), content=content, headers=headers)
            ports.add(answer.extensions["network_stream"].get_extra_info("client_addr"))
            return comparable(answer.status_code, answer.headers, answer.content)

        compare_cases(chunkmq, queue, send)
    assert len(ports) == 1, ports


def test_aiohttp(chunkmq: Broker) -> None:
    """aiohttp's client, every case in one session (its paths as written: `encoded=True`) on one
    connection, then its WebSocket consumes the first message on that same connection: the
    handshake right after a hot pull (answered 400 before app/http/protocol.py's fix)."""
    queue = chunkmq.queue("aiohttp")
    connections: list[object] = []  # each one aiohttp opened

    async def opened(*_: object) -> None:
        connections.append(_)

    async def session() -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(opened)
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), trace_configs=[trace])

    with asyncio.Runner() as runner:  # one loop for the session; compare_cases calls `send` in turn
        client = runner.run(session())

        async def post(path: str, body: bytes, headers: dict[str, str]) -> Sent:
            async with client.post(URL(chunkmq.url + path, encoded=True), data=body, headers=headers) as answer:
                return comparable(answer.status, answer.headers, await answer.read())

        async def consume() -> dict[str, Any]:
            url = f"{chunkmq.url}/api/v1/queues/{queue}/groups/ws/stream?consumer=c"
            async with client.ws_connect(url, headers=chunkmq.auth) as ws:
                await ws.send_json({"type": "credit", "n": 1})
                return json.loads((await ws.receive(timeout=10)).data)  # type: ignore[no-any-return]

        try:
            compare_cases(chunkmq, queue, lambda *request: runner.run(post(*request)))
            pull = runner.run(post(f"/api/v1/queues/{queue}/groups/other/pull", b'{"max_messages":1}',
                                   {**chunkmq.auth, "content-type": "application/json"}))
            assert pull[0] == 200  # hot: the last request the connection serves before the upgrade
            frame = runner.run(consume())
        finally:
            runner.run(client.close())
    assert frame["type"] == "messages" and frame["messages"][0]["body"] == "hello"
    assert len(connections) == 1  # the posts and the WebSocket: one connection, kept alive


def test_websockets(chunkmq: Broker) -> None:
    """websockets' client: a consume stream (token in the header) receives a message published by
    httpx, and acks it."""
    queue = chunkmq.queue("websockets")
    published = httpx.post(f"{chunkmq.url}/api/v1/queues/{queue}/publish", headers=chunkmq.auth, timeout=10,
                           json={"messages": [{"body": "to websockets"}]})
    assert published.status_code == 200

    async def main() -> None:
        url = f"ws://127.0.0.1:{chunkmq.port}/api/v1/queues/{queue}/groups/g/stream?consumer=c"
        async with websockets.connect(url, additional_headers=chunkmq.auth, compression=None) as ws:
            await ws.send(json.dumps({"type": "credit", "n": 1}))
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert frame["type"] == "messages" and frame["messages"][0]["body"] == "to websockets"
            await ws.send(json.dumps({"type": "ack", "offsets": [frame["messages"][0]["offset"]]}))
        group = httpx.get(f"{chunkmq.url}/api/v1/queues/{queue}/groups", headers=chunkmq.auth, timeout=10).json()
        assert [g["in_flight"] for g in group if g["name"] == "g"] == [0]

    asyncio.run(main())
