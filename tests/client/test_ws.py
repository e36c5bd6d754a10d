"""app/client/_ws.py: stream URLs, telling a stream that may come back from one the server refused,
the reconnect backoff, error frames, and the connection read by the calling thread (DirectConnection)
against real websockets servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close
from websockets.server import ServerProtocol
from websockets.sync.server import ServerConnection, serve

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


# ------------------------------------------------------------------ DirectConnection (reader_thread=False)


@contextlib.contextmanager
def ws_server(handler: Callable[[ServerConnection], None]) -> Iterator[str]:
    """A websockets server on 127.0.0.1 running `handler` per connection; yields its ws:// URL."""
    with serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/stream"
        finally:
            server.shutdown()
            thread.join(5)


def test_a_direct_connection_reads_text_binary_and_fragmented_messages_in_the_calling_thread() -> None:
    pongs: list[bool] = []

    def handler(ws: ServerConnection) -> None:
        assert ws.request is not None and ws.request.headers["authorization"] == "Bearer t0k"
        ws.send("text")
        ws.send(b"\x00binary")
        ws.send(["frag", "mented"])  # one message in three frames (the last empty)
        pongs.append(ws.ping().wait(5))  # answered once the client reads
        ws.send(ws.recv())  # echo what the client sends
        ws.close(4404, "queue_not_found")

    with ws_server(handler) as url:
        ws = _ws.open_direct_stream(url, "t0k")
        assert [ws.recv(timeout=5) for _ in range(3)] == ["text", b"\x00binary", "fragmented"]
        ws.send(b"echo")
        assert ws.recv(timeout=5) == b"echo"  # read after the pong went out
        assert pongs == [True]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
        assert isinstance(_ws.closed_error(closed.value), NotFound)
        with pytest.raises(ConnectionClosed):
            ws.send("after the close")
        ws.close()


def test_a_direct_connection_times_out_and_stays_usable() -> None:
    def handler(ws: ServerConnection) -> None:
        ws.send(ws.recv())
        ws.recv()  # until the client closes

    with ws_server(handler) as url:
        ws = _ws.open_direct_stream(url, None)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.2)
        assert 0.2 <= time.monotonic() - start < 2
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0)  # nothing buffered: at once, not a lost connection
        ws.send("still open")
        assert ws.recv(timeout=5) == "still open"
        ws.close()


def raw_server(listener: socket.socket, then: Callable[[socket.socket, ServerProtocol], None]) -> threading.Thread:
    """A server thread that accepts one connection, answers the handshake, then runs `then` on the
    socket and its websockets protocol (no reader thread of its own: it reads only when told)."""

    def serve_one() -> None:
        conn, _ = listener.accept()
        with conn:
            server = ServerProtocol(max_size=None)
            while not (events := server.events_received()):
                server.receive_data(conn.recv(65536))
            server.send_response(server.accept(events[0]))  # type: ignore[arg-type]
            conn.sendall(b"".join(server.data_to_send()))
            then(conn, server)

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    return thread


def test_a_send_waits_for_a_slow_reader_whatever_the_last_reads_timeout() -> None:
    def slow(conn: socket.socket, server: ServerProtocol) -> None:
        time.sleep(0.5)  # the client's 32 MB fill the socket buffers meanwhile
        while not (frames := server.events_received()):
            server.receive_data(conn.recv(1 << 20))
        server.send_text(str(len(frames[0].data)).encode())  # type: ignore[union-attr]
        conn.sendall(b"".join(server.data_to_send()))
        conn.recv(1)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = raw_server(listener, slow)
        ws = _ws.open_direct_stream(f"ws://127.0.0.1:{listener.getsockname()[1]}/", None)
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.01)
        ws.send(b"x" * (32 << 20))  # waits for room, not for what was left of the 0.01 s
        assert ws.recv(timeout=10) == str(32 << 20)
        ws.close()
        thread.join(5)


def test_a_direct_connection_pings_a_silent_server_and_gives_it_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that answers the handshake and then nothing (a peer gone without a FIN): pinged
    after PING_INTERVAL, given up (lost: a reconnect may help) PING_TIMEOUT later."""
    monkeypatch.setattr(_ws, "PING_INTERVAL", 0.3)
    monkeypatch.setattr(_ws, "PING_TIMEOUT", 0.3)
    listener = socket.create_server(("127.0.0.1", 0))
    seen = bytearray()

    def silent(conn: socket.socket, _: ServerProtocol) -> None:
        conn.settimeout(3)
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):  # what the client sends; never answered
                seen.extend(data)

    thread = raw_server(listener, silent)
    with listener:
        ws = _ws.open_direct_stream(f"ws://127.0.0.1:{listener.getsockname()[1]}/", None)
        start = time.monotonic()
        with pytest.raises(ConnectionClosed) as gone:
            ws.recv()
        assert 0.6 <= time.monotonic() - start < 3
        assert isinstance(_ws.closed_error(gone.value), _ws.Lost)
        thread.join(5)
    assert seen and seen[0] & 0x0F == 0x9  # a ping frame went out first


def test_a_direct_stream_nobody_serves_is_lost() -> None:
    with pytest.raises(_ws.Lost, match="cannot open"):
        _ws.open_direct_stream(f"ws://127.0.0.1:{free_port()}/api/v1/queues/q/groups/g/stream", None)
