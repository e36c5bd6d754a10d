"""Connections a client never finishes (app/http/protocol.py) and the connection limit, against
a real server over raw sockets."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx

from chunkmq.http.protocol import OneWrite
from tests.server import ServerProcess


def half_request(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # the headers never end
    return s


def dropped_by_server(s: socket.socket, within: float) -> bool:
    """True when the server closed the connection within `within` seconds, without answering."""
    s.settimeout(within)
    try:
        return s.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_half_sent_requests_are_closed_and_connections_are_bounded(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_REQUEST_HEADER_TIMEOUT_SECONDS="1",
                           CHUNKMQ_MAX_CONNECTIONS="4").start()
    slow = [half_request(server.port) for _ in range(4)]
    try:
        time.sleep(0.2)
        busy = httpx.get(f"{server.url}/healthz")
        assert busy.status_code == 503  # past the limit: refused at once, in API.md's error shape
        assert busy.json()["error"]["code"] == "overloaded" and busy.headers["retry-after"] == "1"
        started = time.monotonic()
        assert all(dropped_by_server(s, 5) for s in slow)
        assert time.monotonic() - started < 3  # after about the one-second header timeout
        assert httpx.get(f"{server.url}/healthz").status_code == 200  # the slots are free again
        idle = socket.create_connection(("127.0.0.1", server.port))  # connects and sends nothing at all
        assert dropped_by_server(idle, 5)
        idle.close()
        head_and_expect_continue_are_answered(server)
    finally:
        for s in slow:
            s.close()
        server.stop()


def head_and_expect_continue_are_answered(server: ServerProcess) -> None:
    """Responses held for their body (OneWrite) still go out without one (HEAD), and 100 Continue
    goes out before the body is sent."""
    assert httpx.head(f"{server.url}/healthz", timeout=5).status_code in (200, 405)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        body = b'{"messages":[{"body":"x"}]}'
        s.sendall(b"PUT /api/v1/queues/q HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 201")
        s.sendall(b"POST /api/v1/queues/q/publish HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                  b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body))
        assert s.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'"durability":"interval"}')


def test_a_response_goes_out_in_one_write_and_a_head_alone_still_goes_out() -> None:
    """OneWrite over a real transport: the head waits for the body and leaves with it; 100 Continue
    leaves at once; a response without a body write (HEAD) leaves when the response ends."""

    def readable(s: socket.socket) -> bytes:
        time.sleep(0.05)
        try:
            return s.recv(65536)
        except BlockingIOError:
            return b""

    async def main() -> None:
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
        out = OneWrite(transport)  # type: ignore[arg-type]
        out.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        assert readable(peer) == b"HTTP/1.1 100 Continue\r\n\r\n"
        out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        assert readable(peer) == b""  # held for the body
        out.write(b"ok")
        assert readable(peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        out.flush()
        assert readable(peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
        out.close()
        peer.close()

    asyncio.run(main())
