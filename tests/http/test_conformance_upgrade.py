"""The conformance suite's upgrades: a WebSocket handshake on a kept-alive connection that has
served other requests (app/http/protocol.py), against a real server over one raw socket. After a
hot POST (a publish, a pull), after a GET, and pipelined right behind any of them, the stream opens
and delivers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.http.raw import Raw, request, upgrade
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("upgrade") / "data", CHUNKMQ_AUTH="off").start()
    yield server
    server.stop()


def before(kind: str, queue: str) -> bytes:
    """The request the connection serves before its upgrade."""
    if kind == "publish":
        return request("POST", f"/api/v1/queues/{queue}/publish", b'{"messages":[{"body":"second"}]}',
                       ("content-type", "application/json"))
    if kind == "pull":  # another group's: the stream's group still has both messages
        return request("POST", f"/api/v1/queues/{queue}/groups/other/pull", b'{"max_messages":1}',
                       ("content-type", "application/json"))
    return request("GET", f"/api/v1/queues/{queue}")


@pytest.mark.parametrize("pipelined", [False, True], ids=["after-answer", "pipelined"])
@pytest.mark.parametrize("kind", ["publish", "pull", "get"])
def test_an_upgrade_after_a_request_on_the_same_connection_opens_the_stream(
        broker: ServerProcess, kind: str, pipelined: bool) -> None:
    queue = f"up-{kind}-{int(pipelined)}"
    raw = Raw(broker.port)
    try:
        raw.send(request("PUT", f"/api/v1/queues/{queue}"))
        assert raw.answer().status == 201
        raw.send(request("POST", f"/api/v1/queues/{queue}/publish", b'{"messages":[{"body":"first"}]}',
                         ("content-type", "application/json")))
        assert raw.answer().status == 200
        stream = upgrade(f"/api/v1/queues/{queue}/groups/g/stream?consumer=c1")
        if pipelined:  # both in one write: the upgrade waits behind the answer before it
            raw.send(before(kind, queue) + stream)
            assert raw.answer().status == 200
        else:
            raw.send(before(kind, queue))
            assert raw.answer().status == 200
            raw.send(stream)
        handshake = raw.answer()
        assert handshake.status == 101, handshake.body
        assert handshake.headers["upgrade"].lower() == "websocket"
        raw.send_text({"type": "credit", "n": 10})
        bodies: list[str] = []
        want = ["first", "second"] if kind == "publish" else ["first"]
        while len(bodies) < len(want):
            opcode, payload = raw.frame()
            assert opcode in (1, 2), payload  # text, or binary (JSON all the same)
            frame = json.loads(payload)
            assert frame["type"] == "messages", frame
            bodies += [m["body"] for m in frame["messages"]]
        assert bodies == want
    finally:
        raw.close()
    assert "Invalid HTTP request" not in broker.log()
