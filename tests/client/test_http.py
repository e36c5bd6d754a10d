"""The blocking client's HTTP layer (app/client/_http.py) against a real broker: timeouts, retries with
backoff, TLS and proxies, through the relay of tests/client/relay.py; and the requests it writes and
the answers it reads, over a socket pair."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from pathlib import Path

import pytest

from chunkmq import Client, ConnectionFailed, QueueFull
from chunkmq.client._http import read_response, request_bytes
from tests.client.relay import Relay, self_signed
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_a_call_times_out_and_a_long_poll_gets_its_wait_on_top(shared_server: ServerProcess, name: str) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.3, retries=0) as mq, \
                pytest.raises(ConnectionFailed, match="timed out"):
            mq.queues()
        assert time.monotonic() - started < 3
    with Client(shared_server.url, timeout=0.3) as mq:
        mq.declare_queue(name)
        started = time.monotonic()
        assert mq.pull(name, "g", 10, wait_ms=800) == []  # the wait is added to the timeout
        assert time.monotonic() - started >= 0.7


def test_a_refusal_that_changed_nothing_is_retried_with_backoff(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url, retries=0) as mq:
        mq.declare_queue(name, max_messages=1, overflow="reject_publish")
        mq.publish_to_queue(name, "fills it")
        with pytest.raises(QueueFull):
            mq.publish_to_queue(name, "no room")
    purger = threading.Timer(0.15, lambda: Client(shared_server.url).purge(name))
    purger.start()
    started = time.monotonic()
    with Client(shared_server.url, retries=6) as mq:  # 0.05, 0.1, 0.2 s ... (each halved at most by jitter)
        mq.publish_to_queue(name, "fits once purged")
    purger.join()
    assert time.monotonic() - started >= 0.15
    with Client(shared_server.url) as mq:
        assert [m.body for m in mq.browse(name).messages] == ["fits once purged"]


def test_a_lost_connection_is_retried_for_reads_and_not_for_publishes(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        mq.declare_queue(name)
    with Relay(shared_server.port, drop=1) as relay, Client(f"http://127.0.0.1:{relay.port}") as mq:
        assert mq.queue(name).messages == 0  # the first connection closed without an answer: again on a new one
        assert relay.connections == 2
        relay.drop = 1
        with Client(f"http://127.0.0.1:{relay.port}") as fresh, pytest.raises(ConnectionFailed):
            fresh.publish_to_queue(name, "once")  # was it stored? A publish is not sent twice on a guess
        assert mq.queue(name).messages == 0
    with Client("http://127.0.0.1:9", retries=2) as nowhere:  # nothing listens: retried, then ConnectionFailed
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="cannot connect"):
            nowhere.publish_to_queue(name, "x")
        assert time.monotonic() - started >= 0.05 * 0.5 + 0.1 * 0.5


def test_tls_with_a_ca_file_and_refused_when_not_trusted(shared_server: ServerProcess, name: str,
                                                         certificate: tuple[Path, Path]) -> None:
    with Relay(shared_server.port, tls=certificate) as tls:
        url = f"https://127.0.0.1:{tls.port}"
        with Client(url, verify=str(certificate[0])) as mq:
            mq.declare_queue(name)
            mq.publish_to_queue(name, ["over", "tls"])
            assert [m.body for m in mq.pull(name, "g", 10)] == ["over", "tls"]
        with Client(url, retries=0) as untrusted, pytest.raises(ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.queues()


def test_proxies_given_or_from_the_environment(shared_server: ServerProcess, name: str,
                                               certificate: tuple[Path, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with Relay(shared_server.port, proxy=True) as proxy:
        with Client(shared_server.url, proxy=f"http://127.0.0.1:{proxy.port}") as mq:
            mq.declare_queue(name)
        assert proxy.seen == [f"PUT {shared_server.url}/api/v1/queues/{name} HTTP/1.1".encode()]
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        with Client(shared_server.url) as mq:
            assert mq.queue(name).messages == 0
        assert len(proxy.seen) == 2
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with Client(shared_server.url) as mq:
            mq.queue(name)
        assert len(proxy.seen) == 2
    with Relay(shared_server.port, tls=certificate) as tls, Relay(tls.port, proxy=True) as proxy, \
            Client(f"https://127.0.0.1:{tls.port}", verify=str(certificate[0]),
                   proxy=f"http://127.0.0.1:{proxy.port}") as mq:
        mq.publish_to_queue(name, "through a tunnel")
        assert proxy.seen == [f"CONNECT 127.0.0.1:{tls.port} HTTP/1.0".encode()]
        assert mq.queue(name).messages == 1


def test_a_request_is_one_write_of_head_and_body_and_refuses_control_characters() -> None:
    sent = request_bytes("POST", "/api/v1/queues/q/publish?mandatory=true", b"\x01\x00body", {"host": "h:1", "a": "b"})
    assert sent == (b"POST /api/v1/queues/q/publish?mandatory=true HTTP/1.1\r\nhost: h:1\r\na: b\r\n"
                    b"content-length: 6\r\n\r\n\x01\x00body")
    assert request_bytes("PUT", "/x", None, {}).endswith(b"content-length: 0\r\n\r\n")
    assert request_bytes("GET", "/x", None, {}) == b"GET /x HTTP/1.1\r\n\r\n"
    for target, headers in [("/x y", {}), ("/x", {"a": "b\r\nevil: 1"}), ("/x", {"a\n": "b"}), ("/x", {"a": "\x00"})]:
        with pytest.raises(ValueError, match="control character"):
            request_bytes("GET", target, None, headers)


def _answer(raw: bytes, method: str = "GET", close: bool = False) -> tuple[int, bytes, dict[str, str], bool] | type:
    """read_response over a socket pair whose other end wrote `raw` (in small pieces) and maybe closed."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        def write() -> None:
            for i in range(0, len(raw), 7):
                theirs.sendall(raw[i:i + 7])
            if close:
                theirs.shutdown(socket.SHUT_WR)
        writer = threading.Thread(target=write)
        writer.start()
        ours.settimeout(5)
        try:
            response, will_close = read_response(ours, method)
        except http.client.HTTPException as exc:
            return type(exc)
        finally:
            writer.join()
    return response.status, response.content, dict(response.headers), will_close


def test_answers_are_read_by_length_chunked_or_to_the_close() -> None:
    assert _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nChunkmq-Durability: fsync\r\n\r\nhello") == (
        200, b"hello", {"content-length": "5", "chunkmq-durability": "fsync"}, False)
    big = bytes(range(256)) * 1000
    assert _answer(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(big), big))[1] == big
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nt: 1\r\n\r\n"
    assert _answer(chunked)[:2] == (200, b"hello world")
    assert _answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n") == (
        204, b"", {"connection": "close"}, True)
    assert _answer(b"HTTP/1.0 200 OK\r\n\r\nto the end", close=True) == (200, b"to the end", {}, True)
    assert _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", method="HEAD")[:2] == (200, b"")
    assert _answer(b"HTTP/1.1 200 OK\r\nA: 1\r\nA: 2\r\nContent-Length: 0\r\n\r\n")[2] == {
        "a": "1, 2", "content-length": "0"}
    # damaged or cut answers are HTTP errors: the connection is dropped (and an idempotent request retried)
    assert _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhalf", close=True) is http.client.IncompleteRead
    assert _answer(b"HTTP/1.1 200 OK\r\nContent-Le", close=True) is http.client.RemoteDisconnected
    assert _answer(b"SMTP 220 hello\r\n\r\n") is http.client.BadStatusLine
    assert _answer(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n") is http.client.HTTPException
    assert _answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n") is http.client.HTTPException
    assert _answer(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n") is http.client.HTTPException
