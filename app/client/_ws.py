"""What both stream clients share: URLs, opening a socket, telling a lost stream from a refused one,
and the reconnect backoff."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as sync_connect

from chunkmq.client.errors import ChunkmqError, ConnectionFailed, api_error
from chunkmq.client.sync import auth_headers

# Close codes after which reconnecting can help: going away, abnormal (no close frame), server error,
# service restart, try again later, bad gateway.
RETRYABLE_CLOSE = frozenset({1001, 1006, 1011, 1012, 1013, 1014})
MAX_FRAME = 1 << 28


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

