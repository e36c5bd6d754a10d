"""A raw HTTP/1.1 and WebSocket client over one socket, for what no client library does on purpose
(an upgrade after a POST on the same connection, pipelining, half-closing, a request split at every
byte), and a reader of answers from bytes (curl's output)."""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import Callable
from typing import Any

KEY = base64.b64encode(b"chunkmq-test-key").decode()


class Answer:
    """One HTTP response: its status, headers (names lowercased) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.headers}, {self.body[:200]!r})"


class Reader:
    """Answers read from a byte stream by their content-length; `fill` adds to `buffer` (raising at
    the stream's end)."""

    def __init__(self, fill: Callable[[], bytes], buffer: bytes = b"") -> None:
        self.fill = fill
        self.buffer = buffer

    def _more(self) -> None:
        data = self.fill()
        if not data:
            raise ConnectionError(f"the stream ended; unread: {self.buffer!r}")
        self.buffer += data

    def take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._more()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def answer(self) -> Answer:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        if status < 200:  # 100 Continue, 101 Switching Protocols: no body
            return Answer(status, headers, b"")
        return Answer(status, headers, self.take(int(headers.get("content-length", 0))))


def answers(data: bytes) -> list[Answer]:
    """Every answer in `data` (curl -i's output), 100 Continue left out."""
    reader = Reader(lambda: b"", data)
    out = []
    while reader.buffer:
        answer = reader.answer()
        if answer.status != 100:
            out.append(answer)
    return out


class Raw(Reader):
    """One connection to 127.0.0.1:port."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        super().__init__(lambda: self.sock.recv(65536))

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed(self) -> bool:
        """Whether the server closed the connection (nothing more to read)."""
        return not self.buffer and self.sock.recv(1) == b""

    def frame(self) -> tuple[int, bytes]:
        """The server's next WebSocket frame (unmasked, as a server's are): its opcode and payload."""
        first, second = self.take(2)
        n = second & 0x7F
        if n == 126:
            n = int.from_bytes(self.take(2), "big")
        elif n == 127:
            n = int.from_bytes(self.take(8), "big")
        return first & 0x0F, self.take(n)

    def send_text(self, message: Any) -> None:
        """A masked text frame of `message` as JSON, as a client sends it."""
        payload = json.dumps(message).encode()
        mask = os.urandom(4)
        n = len(payload)
        length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
        self.send(bytes([0x81]) + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def request(method: str, path: str, body: bytes = b"", *headers: tuple[str, str], version: str = "1.1") -> bytes:
    """A request's bytes, with Host and (for a body or a POST) content-length."""
    out = [f"{method} {path} HTTP/{version}\r\nHost: 127.0.0.1\r\n"]
    out += [f"{name}: {value}\r\n" for name, value in headers]
    if body or method == "POST":
        out.append(f"content-length: {len(body)}\r\n")
    out.append("\r\n")
    return "".join(out).encode() + body


def upgrade(path: str, *headers: tuple[str, str]) -> bytes:
    return request("GET", path, b"", ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                   ("Sec-WebSocket-Key", KEY), ("Sec-WebSocket-Version", "13"), *headers)
