"""A raw HTTP/1.1 and WebSocket client over one socket, for what no client library does on purpose
(an upgrade after a POST on the same connection, pipelining, a request split at every byte)."""

from __future__ import annotations

import base64
import json
import os
import socket
from typing import Any

KEY = base64.b64encode(b"chunkmq-test-key").decode()


class Answer:
    """One HTTP response: its status, headers (names lowercased) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


class Raw:
    """One connection to 127.0.0.1:port; reads answers by their content-length."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed by the server; unread: {self.buffer!r}")
        self.buffer += data

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def answer(self) -> Answer:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        body = b"" if status in (101, 204, 304) or status < 200 else self._take(int(headers.get("content-length", 0)))
        return Answer(status, headers, body)

    def frame(self) -> tuple[int, bytes]:
        """The server's next WebSocket frame (unmasked, as a server's are): its opcode and payload."""
        first, second = self._take(2)
        n = second & 0x7F
        if n == 126:
            n = int.from_bytes(self._take(2), "big")
        elif n == 127:
            n = int.from_bytes(self._take(8), "big")
        return first & 0x0F, self._take(n)

    def send_text(self, message: Any) -> None:
        """A masked text frame of `message` as JSON, as a client sends it."""
        payload = json.dumps(message).encode()
        mask = os.urandom(4)
        n = len(payload)
        length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
        self.send(bytes([0x81]) + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def request(method: str, path: str, body: bytes = b"", *headers: tuple[str, str]) -> bytes:
    """A request's bytes, with Host and (for a body or a POST) content-length."""
    out = [f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"]
    out += [f"{name}: {value}\r\n" for name, value in headers]
    if body or method == "POST":
        out.append(f"content-length: {len(body)}\r\n")
    out.append("\r\n")
    return "".join(out).encode() + body


def upgrade(path: str, *headers: tuple[str, str]) -> bytes:
    return request("GET", path, b"", ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                   ("Sec-WebSocket-Key", KEY), ("Sec-WebSocket-Version", "13"), *headers)
