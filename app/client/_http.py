"""The blocking client's HTTP/1.1 layer: kept-alive connections opened by `http.client` (TCP, TLS,
proxy tunnels), with timeouts, retries with backoff, TLS and proxies.

Not httpx: measured against a broker on the same machine, httpx.Client spends 6-7 ms of client CPU
on a 1.7 MB page and 1.2 ms on a publish of 100 messages; `http.client` 1.1 ms and 0.4 ms
(docs/decisions.md, "Performance"). The API needs little of HTTP: requests with a body of known
length, answers with a Content-Length, no redirects, no cookies. So a request is written here, head
and body in one send (http.client sends them apart: two segments for the broker to wake up to),
and its answer read here: http.client parses an answer's head with the e-mail parser, half of the
client's CPU on a publish of 100 messages.
"""

from __future__ import annotations

import base64
import functools
import http.client
import random
import re
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, urlsplit

from chunkmq.client.errors import ConnectionFailed

# Answers that mean the broker refused the request and changed nothing: queue_full, unavailable or
# overloaded, storage_full (docs/api.md, Errors). Any request may be sent again after a backoff.
RETRY_STATUSES = frozenset({429, 503, 507})
# Methods whose repeat cannot do anything twice: sent again also after a connection lost mid-request.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
BACKOFF = 0.05  # seconds before the first retry; doubled each time
# Errors after which a kept-alive connection is of no more use (the server closed it, or it broke).
LOST = (http.client.HTTPException, ConnectionError, TimeoutError, OSError)


class Response(NamedTuple):
    status: int
    content: bytes
    headers: Mapping[str, str]  # names in lower case


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # sent with a Content-Length, 0 without a body
READ_SIZE = 65536
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")  # what http.client refuses in a target
_BAD_HEADER = re.compile(r"[\x00\r\n]")  # what would end a header line early


class NotSent(Exception):
    """Internal: the connection could not be opened, so the request cannot have reached the broker."""


@functools.lru_cache(maxsize=1024)
def quoted(target: str) -> str:
    """The path (before its query) with what a URL cannot hold percent-encoded: a refused name
    reaches the broker, which says what is wrong with it. Targets repeat: cached."""
    path, mark, query = target.partition("?")
    return quote(path, safe="/:@!$&'()*+,;=-._~") + mark + query


def ssl_context(verify: bool | str | ssl.SSLContext) -> ssl.SSLContext:
    """True: the system's CA certificates; a str: a CA file (PEM); False: no verification."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), as httpx
    and urllib read them."""
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):  # NO_PROXY
        return None
    return urllib.request.getproxies().get(parts.scheme)


class Transport:
    """Kept-alive connections to one broker, shared by threads (each request takes an idle one or
    opens one). `retries` more attempts, with exponential backoff from `backoff` seconds, follow a
    refusal that changed nothing (429, 503, 507), a connection that could not be opened, and, for
    idempotent methods, a connection lost before the answer."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float, *, verify: bool | str | ssl.SSLContext = True,
                 proxy: str | None = None, retries: int = 2, backoff: float = BACKOFF) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the broker's URL is http:// or https://, not {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = {"host": parts.netloc, "accept-encoding": "identity", **headers}
        self.context = ssl_context(verify) if self.https else None
        self.proxy = urlsplit(proxy) if proxy else None
        if self.proxy is not None and self.proxy.username is not None:
            credentials = f"{self.proxy.username}:{self.proxy.password or ''}".encode()
            self.proxy_headers = {"proxy-authorization": "Basic " + base64.b64encode(credentials).decode()}
        else:
            self.proxy_headers = {}
        # Through a proxy, plain HTTP goes to it with absolute URLs; HTTPS through a CONNECT tunnel.
        self.absolute = f"http://{parts.netloc}" if self.proxy is not None and not self.https else ""
        if self.absolute:
            self.headers.update(self.proxy_headers)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        if self.proxy is None:
            if self.https:
                return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.context)
            return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        proxy_host, proxy_port = self.proxy.hostname or "", self.proxy.port or 80
        if not self.https:
            return http.client.HTTPConnection(proxy_host, proxy_port, timeout=self.timeout)
        conn = http.client.HTTPSConnection(proxy_host, proxy_port, timeout=self.timeout, context=self.context)
        conn.set_tunnel(self.host, self.port, headers=self.proxy_headers)
        return conn

    def _take(self) -> http.client.HTTPConnection:
        """An idle connection the server has not closed, or a new one, connected."""
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        while idle is not None:
            sock = idle.sock
            # A kept-alive socket that is readable before we sent anything was closed by the server
            # (its keep-alive timeout) or holds garbage: not reused.
            if sock is not None and not select.select((sock,), (), (), 0)[0]:
                return idle
            idle.close()
            with self._lock:
                idle = self._idle.pop() if self._idle else None
        conn = self._connection()
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise NotSent(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        return conn

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append(conn)

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None,
                extra_seconds: float = 0.0) -> Response:
        """One request, retried as the class says; ConnectionFailed when no answer came."""
        target = self.absolute + self.prefix + quoted(path)
        sent = self.headers if headers is None else {**self.headers, **headers}
        timeout = self.timeout + extra_seconds
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                answer = self._once(method, target, body, sent, timeout)
            except NotSent as exc:
                if last:
                    raise ConnectionFailed(f"{method} {path}: {exc}") from exc.__cause__
            except LOST as exc:
                if last or method not in IDEMPOTENT:
                    raise ConnectionFailed(f"{method} {path}: {exc!r}") from exc
            else:
                if answer.status not in RETRY_STATUSES or last:
                    return answer
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay *= 2
        raise AssertionError("unreachable")

    def _once(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
              timeout: float) -> Response:
        conn = self._take()
        try:
            sock = conn.sock
            sock.settimeout(timeout)
            sock.sendall(request_bytes(method, target, body, headers))
            response, will_close = read_response(sock, method)
        except BaseException:
            conn.close()
            raise
        if will_close:
            conn.close()
        else:
            self._give_back(conn)
        return response

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def request_bytes(method: str, target: str, body: bytes | None, headers: Mapping[str, str]) -> bytes:
    """A request's head and body, as one bytes to send. ValueError for a target or header that would
    break the head (a control character), as http.client refuses them."""
    if _BAD_TARGET.search(target) or _BAD_HEADER.search("".join(headers) + "".join(headers.values())):
        raise ValueError(f"{method} {target!r}: the target or a header holds a control character")
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None or method in BODY_METHODS:
        lines.append(f"content-length: {len(body) if body is not None else 0}")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")


def read_response(sock: socket.socket, method: str) -> tuple[Response, bool]:
    """The answer on `sock` to a request just sent, and whether the server closes the connection
    after it. Bodies come with a Content-Length, chunked, or until the connection closes."""
    buffer = b""
    while True:  # 1xx answers (never asked for) are skipped
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > READ_SIZE:
                raise http.client.LineTooLong("the answer's head")
            buffer += _recv(sock)
        lines = buffer[:end].decode("latin-1").split("\r\n")
        buffer = buffer[end + 4:]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise http.client.BadStatusLine(lines[0])
        status = int(code)
        if status >= 200 or status < 100:
            break
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise http.client.HTTPException(f"a malformed header line: {line!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if method == "HEAD" or status in (204, 304):
        return Response(status, b"", headers), will_close
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Response(status, _read_chunked(sock, buffer), headers), will_close
    length = headers.get("content-length")
    if length is None:  # the body runs until the server closes
        parts = [buffer]
        while chunk := sock.recv(READ_SIZE):
            parts.append(chunk)
        return Response(status, b"".join(parts), headers), True
    if not length.isdigit():
        raise http.client.HTTPException(f"a malformed Content-Length: {length!r}")
    return Response(status, _read_exactly(sock, buffer, int(length)), headers), will_close


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(READ_SIZE)
    if not chunk:
        raise http.client.RemoteDisconnected("the server closed the connection before its answer ended")
    return chunk


def _read_exactly(sock: socket.socket, buffer: bytes, n: int) -> bytes:
    """`n` bytes: what `buffer` already holds, then straight from the socket into one allocation."""
    if len(buffer) >= n:
        return buffer[:n]
    out = bytearray(n)
    view = memoryview(out)
    view[:len(buffer)] = buffer
    got = len(buffer)
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise http.client.IncompleteRead(bytes(out[:got]), n - got)
        got += k
    return bytes(out)


def _read_chunked(sock: socket.socket, buffer: bytes) -> bytes:
    parts = []
    while True:
        while (end := buffer.find(b"\r\n")) < 0:
            buffer += _recv(sock)
        size_text = buffer[:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise http.client.HTTPException(f"a malformed chunk size: {size_text!r}") from None
        buffer = buffer[end + 2:]
        if size == 0:  # the last chunk, then trailers up to an empty line
            while not buffer.startswith(b"\r\n") and b"\r\n\r\n" not in buffer:
                buffer += _recv(sock)
            return b"".join(parts)
        if len(buffer) >= size + 2:  # the chunk and its line end
            data, buffer = buffer[:size + 2], buffer[size + 2:]
        else:
            data, buffer = _read_exactly(sock, buffer, size + 2), b""
        parts.append(data[:size])
