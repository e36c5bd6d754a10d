"""The conformance suite (tests/http/conformance.py) over raw sockets, for what no client does on
purpose: half-closed connections, a request split at every byte, header names in any case,
pipelining, HTTP/1.0, and bodies at the size limits and one byte over. Against a real
`chunkmq serve` with auth on; every hot route answers each case as the ASGI path does."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.http.conformance import CASES, Broker, Case, Sent, broker, case_body, comparable, compare_cases
from tests.http.raw import Answer, Raw, request

#: Small enough that a publish at the limit is still a hot request (a body up to 64 KiB)
MAX_BATCH_BYTES = 4096
MAX_OBJECT_BYTES = 1024 * 1024  # app/api/body.py: a pull's body


@pytest.fixture(scope="module")
def chunkmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from broker(tmp_path_factory.mktemp("raw") / "data", CHUNKMQ_MAX_BATCH_BYTES=str(MAX_BATCH_BYTES))


def head(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    return request("POST", path, body, *headers.items())


def seen(answer: Answer) -> Sent:
    return comparable(answer.status, answer.headers, answer.body)


def test_a_kept_alive_connection(chunkmq: Broker) -> None:
    queue = chunkmq.queue("raw-kept")
    raw = Raw(chunkmq.port)
    try:
        compare_cases(chunkmq, queue, lambda path, body, headers: seen(send(raw, head(path, body, headers))))
    finally:
        raw.close()


def send(raw: Raw, data: bytes) -> Answer:
    raw.send(data)
    return raw.answer()


def test_half_closed_connections_still_get_their_answer(chunkmq: Broker) -> None:
    """The client shuts down its sending side right after the request (as `nc -N` or a client
    that is done sending): the answer still comes, and then the close. (An answer written before
    the server read the end of input has no `connection: close`, one written after has: that is
    timing, either way, so it is left out of the comparison.)"""
    queue = chunkmq.queue("raw-half")

    def half_closed(path: str, body: bytes, headers: dict[str, str]) -> Sent:
        raw = Raw(chunkmq.port)
        try:
            raw.send(head(path, body, headers))
            raw.sock.shutdown(socket.SHUT_WR)
            answer = raw.answer()
            assert raw.closed()
        finally:
            raw.close()
        assert answer.headers.get("connection", "close") == "close"
        answer.headers.pop("connection", None)
        return seen(answer)

    compare_cases(chunkmq, queue, half_closed)


def test_a_request_split_at_every_byte(chunkmq: Broker) -> None:
    """Each request sent one byte at a time (Nagle off, a pause after each): the parser's callbacks
    get its URL, headers and body in pieces."""
    queue = chunkmq.queue("raw-bytes")
    raw = Raw(chunkmq.port)
    raw.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def bytewise(path: str, body: bytes, headers: dict[str, str]) -> Sent:
        for byte in head(path, body, headers):
            raw.send(bytes([byte]))
            time.sleep(0.0002)
        return seen(raw.answer())

    try:
        compare_cases(chunkmq, queue, bytewise)
    finally:
        raw.close()


def _cased(data: bytes, case: Callable[[str], str]) -> bytes:
    """The request with `case` applied to each header name (the request line and body as they were)."""
    top, _, body = data.partition(b"\r\n\r\n")
    line, *fields = top.decode().split("\r\n")
    fields = [case(name) + ":" + value for name, _, value in (f.partition(":") for f in fields)]
    return "\r\n".join([line, *fields]).encode() + b"\r\n\r\n" + body


@pytest.mark.parametrize("case", [str.upper, str.title, lambda s: "".join(
    c.upper() if i % 2 else c for i, c in enumerate(s))], ids=["upper", "title", "mixed"])
def test_header_names_in_any_case(chunkmq: Broker, case: Callable[[str], str]) -> None:
    queue = chunkmq.queue(f"raw-case-{case('ab')}")
    raw = Raw(chunkmq.port)
    try:
        compare_cases(chunkmq, queue,
                      lambda path, body, headers: seen(send(raw, _cased(head(path, body, headers), case))))
    finally:
        raw.close()


def test_pipelined_requests(chunkmq: Broker) -> None:
    """Every case, hot and through ASGI, in one write: answered in order, alike."""
    queue = chunkmq.queue("raw-pipelined")
    raw = Raw(chunkmq.port)
    requests = []
    for case in CASES:
        headers = {**(chunkmq.auth if case.token else {}), "content-type": "application/json"}
        requests += [head(path, case_body(case, queue), headers) for path in case.paths(queue)]
    try:
        raw.send(b"".join(requests))
        answers = [seen(raw.answer()) for _ in requests]
    finally:
        raw.close()
    for n, case in enumerate(CASES):
        assert answers[2 * n][0] == case.status, (case.name, answers[2 * n])
        assert answers[2 * n] == answers[2 * n + 1], case.name


@pytest.mark.parametrize("keep_alive", [False, True], ids=["plain", "asking-keep-alive"])
def test_http_1_0(chunkmq: Broker, keep_alive: bool) -> None:
    """HTTP/1.0 is answered with `connection: close` and closed, even when it asks for
    `Connection: keep-alive` (as uvicorn does), hot and through ASGI alike."""
    queue = chunkmq.queue(f"raw-10-{keep_alive}")

    def http_1_0(path: str, body: bytes, headers: dict[str, str]) -> Sent:
        raw = Raw(chunkmq.port)
        try:
            extra = {"connection": "keep-alive"} if keep_alive else {}
            raw.send(request("POST", path, body, *headers.items(), *extra.items(), version="1.0"))
            answer = raw.answer()
            assert raw.closed() and answer.headers["connection"] == "close"
        finally:
            raw.close()
        return seen(answer)

    compare_cases(chunkmq, queue, http_1_0)


def _sized(case: Case, n: int) -> bytes:
    """The case's body padded with spaces to `n` bytes (still the same JSON)."""
    body = case.body
    assert len(body) <= n
    return body[:-1] + b" " * (n - len(body)) + body[-1:]


SIZED = [
    (Case("publish", "/api/v1/queues/{q}/publish", b'{"messages":[{"body":"at the limit"}]}', True, 200),
     MAX_BATCH_BYTES, "batch_too_large"),
    (Case("pull", "/api/v1/queues/{q}/groups/{g}/pull", b'{"max_messages":1}', True, 200),
     MAX_OBJECT_BYTES, "body_too_large"),
]


@pytest.mark.parametrize(("case", "limit", "code"), SIZED, ids=["publish", "pull"])
def test_bodies_at_the_size_limit_and_one_byte_over(chunkmq: Broker, case: Case, limit: int, code: str) -> None:
    """A body of exactly the limit is answered; one byte more is 413 with the route's code, hot and
    through ASGI alike, and the connection goes on answering."""
    queue = chunkmq.queue(f"raw-size-{case.name}")
    headers = {**chunkmq.auth, "content-type": "application/json"}
    raw = Raw(chunkmq.port)
    try:
        for size, status in ((limit, 200), (limit + 1, 413)):
            hot_path, asgi_path = case.paths(queue)
            body = _sized(case, size)
            assert json.loads(body) == json.loads(case.body) and len(body) == size
            hot, through = (seen(send(raw, head(path, body, headers))) for path in (hot_path, asgi_path))
            assert hot[0] == status, hot
            assert hot == through
            if status == 413:
                assert hot[2]["error"]["code"] == code
        publish = head(f"/api/v1/queues/{queue}/publish", b'{"messages":[{"body":"after"}]}', headers)
        assert send(raw, publish).status == 200  # the same connection, after the refusal
    finally:
        raw.close()
