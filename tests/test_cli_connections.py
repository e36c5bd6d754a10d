"""Connections a client never finishes (app/cli.py's HTTP protocol) and the connection limit, against
a real server over raw sockets."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

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
    finally:
        for s in slow:
            s.close()
        server.stop()
