"""What both stream clients share: URLs, opening a socket, telling a lost stream from a refused one,
and the reconnect backoff."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from typing import NoReturn
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.frames import CloseCode, Frame, Opcode, apply_mask
from websockets.http11 import Response
from websockets.protocol import Event, State
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as sync_connect
from websockets.uri import parse_uri

from chunkmq.client._calls import auth_headers
from chunkmq.client.errors import ChunkmqError, ConnectionFailed, api_error
from chunkmq.wire import frames

# Close codes after which reconnecting can help: going away, abnormal (no close frame), server error,
# service restart, try again later, bad gateway.
RETRYABLE_CLOSE = frozenset({1001, 1006, 1011, 1012, 1013, 1014})
MAX_FRAME = 1 << 28
PING_INTERVAL = 20.0  # seconds without a frame from the server before a direct connection pings it
PING_TIMEOUT = 20.0  # then seconds without any frame before it counts the server as gone
SEND_TIMEOUT = 40.0  # seconds a direct connection's frame may wait for room in the socket's buffer


class Lost(Exception):
    """Internal: the connection is gone in a way a reconnect may fix."""


def ws_url(base_url: str, path: str, params: Mapping[str, str] | None = None) -> str:
    scheme, rest = base_url.split("://", 1)
    url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"
    return f"{url}?{urlencode(params)}" if params else url


async def open_stream(url: str, token: str | None) -> ClientConnection:
    """Open a stream socket. No per-message compression: deflating every frame costs both sides more
    CPU than the loopback or LAN bandwidth it saves. Protocol pings every 20 s find dead peers."""
    try:
        return await connect(url, additional_headers=auth_headers(token), compression=None, max_size=MAX_FRAME,
                             open_timeout=10, ping_interval=20, ping_timeout=20)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise Lost(f"cannot open {url}: {exc!r}") from exc


def open_blocking_stream(url: str, token: str | None) -> SyncConnection:
    """open_stream for blocking code: the socket is read and written by the calling thread (and
    websockets' own reader thread), with no event loop to hand each call to."""
    try:
        return sync_connect(url, additional_headers=auth_headers(token), compression=None, max_size=MAX_FRAME,
                            open_timeout=10, ping_interval=20, ping_timeout=20)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise Lost(f"cannot open {url}: {exc!r}") from exc


class DirectConnection:
    """A client WebSocket whose socket only the calling thread reads and writes (websockets' Sans-I/O
    protocol over a plain socket): a frame reaches the caller with no hop between threads.

    A message goes out as one frame written here (app/wire/frames.py), and a chunk read that is one
    whole message frame is taken here, both without websockets' frame writer and parser (about a
    third of a one-message stream's time in the client); everything else is websockets'.

    The subset of websockets' blocking connection the stream clients use: `recv`, `send`, `close`.
    Pings from the server are answered, and the server pinged after PING_INTERVAL seconds of silence,
    while the caller is in `recv` or `send`: a caller that does neither for longer than the server's
    ping interval and timeout (40 s by default) is dropped by the server."""

    def __init__(self, sock: socket.socket, protocol: ClientProtocol, events: list[Event],
                 boundary: int | None = None) -> None:
        self.sock = sock
        self.protocol = protocol
        # Bytes of the stream until the next frame starts (0: the next read starts with one), or None
        # where that is not known (bytes came after the handshake's answer in its read).
        self._boundary = boundary
        self._messages: deque[str | bytes] = deque()
        self._parts: list[bytes] = []  # a fragmented message so far
        self._opcode = Opcode.BINARY  # and its kind
        self._heard = time.monotonic()  # when the server last sent anything
        self._pinged = False
        self._seconds: float | None = None  # the socket's timeout
        self._take(events)

    def recv(self, timeout: float | None = None) -> str | bytes:
        """The next text (str) or binary (bytes) message; TimeoutError when none came within
        `timeout` seconds (None: wait for one), ConnectionClosed once the connection is closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._messages:
            self._read(deadline)
        return self._messages.popleft()

    def send(self, data: str | bytes) -> None:
        """Send one text (str) or binary (bytes) message; ConnectionClosed once it is closed."""
        if self.protocol.state is not State.OPEN:
            self._closed()
        text, payload = (True, data.encode()) if isinstance(data, str) else (False, data)
        key = os.urandom(frames.KEY)  # as websockets masks: a fresh key per frame
        self._write(b"".join((frames.head(len(payload), text, masked=True), key, apply_mask(payload, key))))

    def close(self) -> None:
        """Send a close frame (when still open) and close the socket."""
        try:
            if self.protocol.state is State.OPEN:
                self.protocol.send_close()
                self._flush()
        except (OSError, ConnectionClosed):
            pass
        finally:
            self.sock.close()

    def _read(self, deadline: float | None) -> None:
        """Read what the socket has (waiting until `deadline`) into messages; answer pings and closes."""
        if self.protocol.state is State.CLOSED:
            self._closed()
        now = time.monotonic()
        silent = now - self._heard
        if silent >= PING_INTERVAL + PING_TIMEOUT:
            self._lost()
        if silent >= PING_INTERVAL and not self._pinged and self.protocol.state is State.OPEN:
            self._pinged = True
            self.protocol.send_ping(b"")
            self._flush()
        wake = self._heard + (PING_INTERVAL if not self._pinged else PING_INTERVAL + PING_TIMEOUT)
        wait = wake - now if deadline is None else min(wake, deadline) - now
        self._timeout(max(wait, 0.001))  # never 0: that would make the socket non-blocking
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            return
        except OSError:
            self._lost()
        self._heard = time.monotonic()
        self._pinged = False
        at = self._boundary
        # one whole message with nothing of another before it (a fragment's end is websockets')
        if at == 0 and not self._parts and self.protocol.state is State.OPEN:
            start = frames.whole(data, False, MAX_FRAME)  # a server's frames are not masked
            if start:
                self._message(data[start:], data[0] == frames.TEXT)
                return
        if data:
            self.protocol.receive_data(data)
            if at is not None:
                self._boundary = frames.next_frame(data, at)
        else:
            self.protocol.receive_eof()
        self._take(self.protocol.events_received())

    def _take(self, events: list[Event]) -> None:
        """Keep the messages among `events`, joining fragments (control frames are the protocol's),
        then send what websockets answered them with (pongs, the answer to a close): nothing it queued
        is left waiting, so a frame this connection writes itself (`send`) goes out in order."""
        for frame in events:
            if not isinstance(frame, Frame) or frame.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                continue
            if frame.opcode is not Opcode.CONT:
                self._opcode = frame.opcode
            self._parts.append(bytes(frame.data))
            if frame.fin:
                data = b"".join(self._parts)
                self._parts = []
                self._message(data, self._opcode is Opcode.TEXT)
        self._flush()

    def _message(self, data: bytes, text: bool) -> None:
        """Keep one whole message; text that is not UTF-8 fails the connection (1007), as websockets'
        own connections do."""
        if not text:
            self._messages.append(data)
            return
        try:
            self._messages.append(data.decode())
        except UnicodeDecodeError as exc:
            self.protocol.fail(CloseCode.INVALID_DATA, str(exc))
            self._flush()

    def _timeout(self, seconds: float) -> None:
        if seconds != self._seconds:
            self.sock.settimeout(seconds)
            self._seconds = seconds

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self._write(data)
            else:  # the end of our side, after a close
                try:
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    self._lost()

    def _write(self, data: bytes) -> None:
        try:
            self._timeout(SEND_TIMEOUT)  # not what is left of the last read's wait
            self.sock.sendall(data)
        except OSError:
            self._lost()

    def _lost(self) -> None:
        """The socket failed or the server went silent: the connection is over (1006)."""
        self.protocol.receive_eof()
        with contextlib.suppress(OSError):
            self.sock.close()
        self._closed()

    def _closed(self) -> NoReturn:
        if self.protocol.state is not State.CLOSED:
            self.protocol.receive_eof()
        raise self.protocol.close_exc


def open_direct_stream(url: str, token: str | None) -> DirectConnection:
    """open_blocking_stream without websockets' reader thread: see DirectConnection."""
    uri = parse_uri(url)
    protocol = ClientProtocol(uri, max_size=MAX_FRAME)  # no extensions: no compression, as open_stream
    try:
        sock = socket.create_connection((uri.host, uri.port), timeout=10)
    except OSError as exc:
        raise Lost(f"cannot open {url}: {exc!r}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if uri.secure:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=uri.host)
        request = protocol.connect()
        request.headers.update(auth_headers(token))
        protocol.send_request(request)
        sock.sendall(b"".join(protocol.data_to_send()))
        events: list[Event] = []
        received = b""
        while not events:  # the handshake's answer
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection during the handshake")
            received += data
            protocol.receive_data(data)
            events = protocol.events_received()
        if protocol.handshake_exc is not None:
            raise protocol.handshake_exc
        assert isinstance(events[0], Response)
        # the answer has no body: frames start right after its headers
        boundary = frames.next_frame(received, received.index(b"\r\n\r\n") + 4)
        return DirectConnection(sock, protocol, events[1:], boundary)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        sock.close()
        raise Lost(f"cannot open {url}: {exc!r}") from exc


def open_sync_stream(url: str, token: str | None, reader_thread: bool) -> SyncConnection | DirectConnection:
    """A blocking client's connection: read by websockets' reader thread, or by the caller's own
    (`reader_thread=False`, DirectConnection)."""
    return (open_blocking_stream if reader_thread else open_direct_stream)(url, token)


def closed_error(exc: ConnectionClosed) -> Exception:
    """Lost (reconnect) or the error to raise for a stream the server closed."""
    close = exc.rcvd
    code = close.code if close is not None else 1006
    if code in RETRYABLE_CLOSE:
        return Lost(f"stream closed with {code}")
    assert close is not None
    if 4000 <= code < 5000:
        return api_error(close.reason or "error", f"the server closed the stream ({code})", code - 4000)
    return ConnectionFailed(f"the server closed the stream with {code} {close.reason!r}")


class Backoff:
    """Exponential backoff with jitter, up to `retry_for` seconds in all (then ConnectionFailed)."""

    def __init__(self, retry_for: float, first: float = 0.05, longest: float = 5.0) -> None:
        self.deadline = time.monotonic() + retry_for
        self.delay = first
        self.longest = longest

    def next_delay(self, cause: BaseException) -> float:
        """Seconds to wait before the next attempt; ConnectionFailed past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ConnectionFailed(f"gave up reconnecting: {cause}") from cause
        delay = min(left, self.delay * random.uniform(0.5, 1.0))
        self.delay = min(self.longest, self.delay * 2)
        return delay

    async def wait(self, cause: BaseException) -> None:
        await asyncio.sleep(self.next_delay(cause))


def frame_error(frame: dict[str, object]) -> ChunkmqError:
    error = frame.get("error")
    if isinstance(error, dict):
        return api_error(str(error.get("code", "error")), str(error.get("message", "")))
    return ConnectionFailed(f"unexpected frame from the server: {frame!r}"[:300])

