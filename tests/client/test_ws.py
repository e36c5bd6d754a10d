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
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import Protocol
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


def raw_server(listener: socket.socket, then: Callable[[socket.socket, ServerProtocol], None],
               after_answer: bytes = b"") -> threading.Thread:
    """A server thread that accepts one connection, answers the handshake (`after_answer` in the same
    write), then runs `then` on the socket and its websockets protocol (no reader thread of its own:
    it reads only when told)."""

    def serve_one() -> None:
        conn, _ = listener.accept()
        with conn:
            server = ServerProtocol(max_size=None)
            while not (events := server.events_received()):
                server.receive_data(conn.recv(65536))
            server.send_response(server.accept(events[0]))  # type: ignore[arg-type]
            conn.sendall(b"".join(server.data_to_send()) + after_answer)
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


def test_a_read_that_is_one_whole_message_skips_websockets_parser(
        websockets_parsed: Callable[[type[Protocol]], list[bytes]]) -> None:
    """A read that is exactly one whole text or binary frame is taken without websockets' parser;
    fragments, several frames in a read, control frames and a frame cut across reads go through it,
    and whole frames after them skip it again. Text that is not UTF-8 fails the connection (1007).
    What the client sends reads back through websockets as the same messages."""
    parsed = websockets_parsed(ClientProtocol)  # reads websockets' parser was given
    big = bytes(range(256)) * 300  # over a read of 64 KiB: cut
    chunks = [
        [Frame(Opcode.TEXT, b"one")],
        [Frame(Opcode.BINARY, b"\x00two")],
        [Frame(Opcode.TEXT, b"frag", fin=False), Frame(Opcode.CONT, b"mented")],
        [Frame(Opcode.PING, b"p"), Frame(Opcode.TEXT, b"after a ping")],
        [Frame(Opcode.TEXT, b"three")],
        [Frame(Opcode.BINARY, big)],
        [Frame(Opcode.TEXT, "f\u00f6ur".encode())],
        [Frame(Opcode.TEXT, b"\xff\xfe")],  # not UTF-8
    ]
    received: list[bytes] = []  # the client's messages, as websockets' server read them

    def script(conn: socket.socket, server: ServerProtocol) -> None:
        for chunk in chunks:
            conn.sendall(b"".join(frame.serialize(mask=False) for frame in chunk))
            while True:  # lock-step: the client's answer before the next chunk
                events = server.events_received()
                data = [e.data for e in events if isinstance(e, Frame) and e.opcode in (Opcode.TEXT, Opcode.BINARY)]
                received.extend(data)
                if data or any(isinstance(e, Frame) and e.opcode is Opcode.CLOSE for e in events):
                    break
                server.receive_data(conn.recv(1 << 20))

    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = raw_server(listener, script)
        ws = _ws.open_direct_stream(f"ws://127.0.0.1:{listener.getsockname()[1]}/", None)
        got = []
        for n in range(7):
            got.append(ws.recv(timeout=5))
            ws.send(big if n == 5 else f"got {n}")
        assert got == ["one", b"\x00two", "fragmented", "after a ping", "three", big, "f\u00f6ur"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
        assert closed.value.sent is not None and closed.value.sent.code == 1007
        ws.close()
        thread.join(5)
    assert received == [b"got 0", b"got 1", b"got 2", b"got 3", b"got 4", big, b"got 6"]
    whole = [b"".join(frame.serialize(mask=False) for frame in chunk) for chunk in chunks]
    assert parsed[0].startswith(b"HTTP/1.1 101 ")  # the handshake's answer, then only these:
    assert parsed[1:3] == [whole[2], whole[3]] and b"".join(parsed[3:]) == whole[5]


def test_frames_that_come_with_the_handshake_s_answer_leave_the_next_reads_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the next frame starts is known from the handshake's answer on, even when part of a
    frame came in the same read: the read after that frame's end, one whole frame, skips the parser."""
    first = Frame(Opcode.BINARY, b"x" * 300).serialize(mask=False)

    def then(conn: socket.socket, server: ServerProtocol) -> None:
        time.sleep(0.05)
        conn.sendall(first[5:])
        while not any(isinstance(e, Frame) for e in server.events_received()):
            server.receive_data(conn.recv(65536))  # the client's answer
        conn.sendall(Frame(Opcode.TEXT, b"second").serialize(mask=False))
        conn.recv(1)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = raw_server(listener, then, after_answer=first[:5])  # the first frame, cut
        ws = _ws.open_direct_stream(f"ws://127.0.0.1:{listener.getsockname()[1]}/", None)
        assert ws.recv(timeout=5) == b"x" * 300
        parsed: list[bytes] = []
        receive_data = ws.protocol.receive_data
        monkeypatch.setattr(ws.protocol, "receive_data", lambda data: (parsed.append(data), receive_data(data)))
        ws.send("ok")
        assert ws.recv(timeout=5) == "second"
        assert parsed == []
        ws.close()
        thread.join(5)


def test_a_ping_that_comes_with_the_handshake_s_answer_is_answered_at_once() -> None:
    """A ping in the read that brings the handshake's answer gets its pong as the connection opens,
    not only at the client's next read or send (the server here waits for it before sending more)."""
    pongs: list[Frame] = []

    def then(conn: socket.socket, server: ServerProtocol) -> None:
        conn.settimeout(5)
        while not pongs:
            server.receive_data(conn.recv(65536))
            pongs.extend(e for e in server.events_received() if isinstance(e, Frame) and e.opcode is Opcode.PONG)
        conn.sendall(Frame(Opcode.TEXT, b"after the pong").serialize(mask=False))
        conn.recv(1)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = raw_server(listener, then, after_answer=Frame(Opcode.PING, b"hi").serialize(mask=False))
        ws = _ws.open_direct_stream(f"ws://127.0.0.1:{listener.getsockname()[1]}/", None)
        assert ws.recv(timeout=5) == "after the pong"
        ws.close()
        thread.join(5)
    assert [pong.data for pong in pongs] == [b"hi"]


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
