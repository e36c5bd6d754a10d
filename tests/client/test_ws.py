"""app/client/_ws.py: stream URLs, telling a stream that may come back from one the server refused,
the reconnect backoff, and error frames."""

from __future__ import annotations

import asyncio
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close

from chunkmq.client import _ws
from chunkmq.client.errors import ConnectionFailed, NotFound, QueueFull, Unauthorized
from tests.server import free_port


def test_stream_urls_follow_the_base_urls_scheme() -> None:
    assert _ws.ws_url("http://h:8000", "/api/v1/x/stream") == "ws://h:8000/api/v1/x/stream"
    assert _ws.ws_url("https://h", "/s", {"group": "g 1", "credit": "5"}) == "wss://h/s?group=g+1&credit=5"


@pytest.mark.parametrize("code", sorted(_ws.RETRYABLE_CLOSE))
def test_closes_a_reconnect_can_fix_are_lost(code: int) -> None:
    assert isinstance(_ws.closed_error(ConnectionClosed(Close(code, ""), None)), _ws.Lost)


def test_no_close_frame_at_all_is_lost() -> None:
    assert isinstance(_ws.closed_error(ConnectionClosed(None, None)), _ws.Lost)


def test_an_api_close_code_is_the_api_error_of_its_status() -> None:
    error = _ws.closed_error(ConnectionClosed(Close(4404, "queue_not_found"), None))
    assert isinstance(error, NotFound) and (error.code, error.status) == ("queue_not_found", 404)
    assert isinstance(_ws.closed_error(ConnectionClosed(Close(4401, ""), None)), Unauthorized)


def test_other_closes_are_connection_failures_naming_the_code() -> None:
    error = _ws.closed_error(ConnectionClosed(Close(1000, "bye"), None))
    assert isinstance(error, ConnectionFailed) and "1000 'bye'" in str(error)


def test_backoff_doubles_with_jitter_up_to_the_longest_and_gives_up_at_the_deadline() -> None:
    backoff = _ws.Backoff(retry_for=60, first=0.1, longest=0.4)
    delays = [backoff.next_delay(OSError("x")) for _ in range(5)]
    for delay, ceiling in zip(delays, (0.1, 0.2, 0.4, 0.4, 0.4), strict=True):
        assert ceiling / 2 <= delay <= ceiling
    over = _ws.Backoff(retry_for=0)
    with pytest.raises(ConnectionFailed, match="gave up reconnecting: refused") as gave_up:
        over.next_delay(OSError("refused"))
    assert isinstance(gave_up.value.__cause__, OSError)


def test_the_last_wait_ends_at_the_deadline() -> None:
    backoff = _ws.Backoff(retry_for=0.2, first=10, longest=10)
    start = time.monotonic()
    asyncio.run(backoff.wait(OSError("x")))
    assert time.monotonic() - start < 1.0  # not the 5..10 s the jitter would give


def test_error_frames_become_typed_errors() -> None:
    error = _ws.frame_error({"error": {"code": "queue_full", "message": "no room"}})
    assert isinstance(error, QueueFull) and error.message == "no room" and error.retryable
    odd = _ws.frame_error({"type": "surprise", "data": "x" * 1000})
    assert isinstance(odd, ConnectionFailed) and len(str(odd)) == 300


def test_a_stream_nobody_serves_is_lost_not_an_api_error() -> None:
    url = f"ws://127.0.0.1:{free_port()}/api/v1/queues/q/groups/g/stream"
    with pytest.raises(_ws.Lost, match="cannot open"):
        asyncio.run(_ws.open_stream(url, "token"))
    with pytest.raises(_ws.Lost, match="cannot open"):
        _ws.open_blocking_stream(url, None)
