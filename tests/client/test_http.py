"""The blocking client's HTTP layer (app/client/_http.py) against a real broker: timeouts, retries with
backoff, TLS and proxies, through the relay of tests/client/relay.py."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from chunkmq import Client, ConnectionFailed, QueueFull
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
