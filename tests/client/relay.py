"""A TCP relay on 127.0.0.1 in front of a real broker, for the client's transport tests: it can
terminate TLS (with a certificate made by `openssl`), act as an HTTP proxy (CONNECT tunnels and
absolute URLs), or close the first connections it accepts after reading their request."""

from __future__ import annotations

import contextlib
import select
import socket
import socketserver
import ssl
import subprocess
import threading
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, valid for a day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


class Relay(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target_port: int, *, tls: tuple[Path, Path] | None = None, proxy: bool = False,
                 drop: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.target_port = target_port
        self.proxy = proxy
        self.drop = drop
        self.connections = 0
        self.seen: list[bytes] = []  # proxy: the first request line of each connection
        self.tls: ssl.SSLContext | None = None
        if tls is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*tls)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(socketserver.BaseRequestHandler):
    server: Relay

    def handle(self) -> None:
        relay = self.server
        relay.connections += 1
        sock: socket.socket = self.request
        if relay.tls is not None:
            sock = relay.tls.wrap_socket(sock, server_side=True)
        if relay.drop > 0:
            relay.drop -= 1
            sock.recv(65536)  # the request arrived; no answer comes
            sock.close()
            return
        pending = b""
        if relay.proxy:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                head += chunk
            relay.seen.append(head.split(b"\r\n", 1)[0])
            if head.startswith(b"CONNECT "):
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pending = head.split(b"\r\n\r\n", 1)[1]
            else:  # an absolute URL: the broker takes it as it is
                pending = head
        with socket.create_connection(("127.0.0.1", relay.target_port)) as upstream:
            upstream.sendall(pending)
            _pipe(sock, upstream)
        with contextlib.suppress(OSError):
            sock.close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until one side closes."""
    peers = {a: b, b: a}
    while True:
        # TLS may hold decrypted bytes that select cannot see
        readable = [s for s in (a, b) if isinstance(s, ssl.SSLSocket) and s.pending()]
        if not readable:
            readable, _, _ = select.select([a, b], [], [], 30)
        if not readable:
            return
        for sock in readable:
            try:
                data = sock.recv(65536)
            except (OSError, ssl.SSLError):
                return
            if not data:
                return
            peers[sock].sendall(data)
