"""WebSocket heartbeats (issue #5): the server pings every CHUNKMQ_WS_PING_INTERVAL seconds and drops a
peer that does not answer within CHUNKMQ_WS_PING_TIMEOUT, so a dead consumer stops holding credit and
its in-flight messages go to the live consumers of its group.

The dead consumer is a plain TCP socket that does the HTTP upgrade by hand, grants credit and then never
reads again (so it never answers a ping, like a hung process or a peer behind a dead link). Whether the
server closed the connection is read from the kernel's TCP state, without reading the socket.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from chunkmq.config import Settings
from tests.api.client import ok
from tests.api.test_streams import consume_url, group_info, open_ws, recv, run, send, synced
from tests.server import ServerProcess

PING = 0.5  # interval and timeout: a dead peer is dropped about 2 * PING after its last pong

# Linux TCP states (include/net/tcp_states.h), as in struct tcp_info and /proc/net/tcp.
ESTABLISHED, FIN_WAIT1, FIN_WAIT2, CLOSE, CLOSE_WAIT = 1, 4, 5, 7, 8


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("heartbeat")) / "data"
    proc = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_WS_PING_INTERVAL=str(PING),
                         CHUNKMQ_WS_PING_TIMEOUT=str(PING)).start()
    yield proc
    proc.stop()


def _client_frame(payload: bytes) -> bytes:
    """One masked text frame (RFC 6455 5.2), as a client must send it; payloads here are short."""
    assert len(payload) < 126
    mask = os.urandom(4)
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def dead_consumer(server: ServerProcess, q: str, consumer: str, credit: int, rcvbuf: int = 0) -> socket.socket:
    """Upgrade to a consume stream, grant credit, and from then on never read (so never answer a ping)."""
    s = socket.create_connection(("127.0.0.1", server.port))
    if rcvbuf:  # before any data arrives: a small window fills up quickly
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        f"GET /api/v1/queues/{q}/groups/g/stream?consumer={consumer} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    response = b""
    while not response.endswith(b"\r\n\r\n"):  # byte by byte: nothing after the headers is consumed
        chunk = s.recv(1)
        assert chunk, f"connection closed during the upgrade: {response!r}"
        response += chunk
    assert response.startswith(b"HTTP/1.1 101 "), response
    s.sendall(_client_frame(b'{"type":"credit","n":%d}' % credit))
    return s


def client_tcp_state(s: socket.socket) -> int:
    """tcpi_state of our end: CLOSE_WAIT once the server's FIN arrived (read without reading data)."""
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def server_tcp_state(server_port: int, client: socket.socket) -> int | None:
    """The state of the server's end of `client`'s connection, from /proc/net/tcp (None: gone). A
    server that closed its socket shows FIN_WAIT1/2 even when the FIN cannot reach the client yet."""
    client_port = client.getsockname()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        if (local_port, remote_port) == (server_port, client_port):
            return int(fields[3], 16)
    return None


def in_flight_to(server: ServerProcess, q: str, n: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while group_info(server, q)["in_flight"] < n:
        assert time.monotonic() < deadline, group_info(server, q)
        time.sleep(0.02)


def test_ping_settings_must_be_positive() -> None:
    assert Settings(ws_ping_interval=0.25, ws_ping_timeout=2).ws_ping_timeout == 2.0
    for bad in ({"ws_ping_interval": 0}, {"ws_ping_timeout": -1}):
        with pytest.raises(ValidationError):
            Settings(**bad)


def test_a_consumer_that_stops_answering_pings_is_dropped_and_its_messages_go_to_another(
    srv: ServerProcess,
) -> None:
    q, ack_timeout = "dead-peer", 1.5
    with httpx.Client(base_url=srv.url) as api:
        ok(api.put(f"/api/v1/queues/{q}", json={"ack_timeout_ms": int(ack_timeout * 1000)}), 201)
        dead = dead_consumer(srv, q, "dead", credit=1000)
        opened = time.monotonic()
        try:
            # Taken before the publish: delivery happens later, so the ack timeout counts from after this.
            published = time.monotonic()
            ok(api.post(f"/api/v1/queues/{q}/publish", json={"messages": [{"body": str(i)} for i in range(5)]}))
            in_flight_to(srv, q, 5)  # all five went to the dead consumer, which still has 995 credit

            async def main() -> None:
                async with open_ws(consume_url(srv, q, consumer="live")) as live:
                    await send(live, type="credit", n=1000)
                    # The server drops the dead peer one interval + one timeout after the upgrade.
                    while client_tcp_state(dead) == ESTABLISHED:
                        assert time.monotonic() - opened < 2 * PING + 1.5, "the dead peer was not dropped"
                        await asyncio.sleep(0.02)
                    dropped_after = time.monotonic() - opened
                    assert dropped_after >= 2 * PING - 0.1, dropped_after  # by the heartbeat, not at once
                    assert client_tcp_state(dead) == CLOSE_WAIT
                    # Its messages come back after their ack timeout, to the only consumer left.
                    got: dict[int, int] = {}
                    while len(got) < 5:
                        for m in (await recv(live, ack_timeout + 3))["messages"]:
                            got[m["offset"]] = m["delivery_count"]
                    assert time.monotonic() - published >= ack_timeout - 0.002  # the server counts whole ms
                    assert got == {i: 2 for i in range(5)}
                    # New messages too: the dead consumer's 995 unused credits are gone with it.
                    async with httpx.AsyncClient(base_url=srv.url) as aapi:
                        body = {"messages": [{"body": str(i)} for i in range(5, 10)]}
                        ok(await aapi.post(f"/api/v1/queues/{q}/publish", json=body))
                    fresh: list[int] = []
                    while len(fresh) < 5:
                        fresh += [m["offset"] for m in (await recv(live))["messages"]]
                    assert fresh == [5, 6, 7, 8, 9]
                    await send(live, type="ack", up_to=10)
                    await synced(live)

            run(main())
        finally:
            dead.close()
    info = group_info(srv, q)
    assert (info["ack_floor"], info["in_flight"], info["pending_redelivery"]) == (10, 0, 0)


def test_a_dead_consumer_with_a_full_tcp_window_is_dropped_too(srv: ServerProcess) -> None:
    """uvicorn's own close waits for its write buffer to drain, which a peer that does not read never
    lets happen; app/http/websocket.py aborts such a connection instead."""
    q = "full-window"
    with httpx.Client(base_url=srv.url) as api:
        ok(api.put(f"/api/v1/queues/{q}", json={"ack_timeout_ms": 60_000}), 201)
        dead = dead_consumer(srv, q, "dead", credit=1000, rcvbuf=4096)
        opened = time.monotonic()
        try:
            body = "x" * 200_000
            for _ in range(40):  # 8 MB: far more than both kernels' socket buffers hold
                ok(api.post(f"/api/v1/queues/{q}/publish", json={"messages": [{"body": body}]}))
            in_flight_to(srv, q, 1)
            state = server_tcp_state(srv.port, dead)
            while state == ESTABLISHED:
                assert time.monotonic() - opened < 2 * PING + 2.0, "the server kept the dead peer's connection"
                time.sleep(0.02)
                state = server_tcp_state(srv.port, dead)
            # The server let go of its socket; the kernel still owes the unread bytes, so no FIN has reached us.
            assert state in (FIN_WAIT1, FIN_WAIT2, CLOSE, None), state
            assert time.monotonic() - opened >= 2 * PING - 0.1
            assert client_tcp_state(dead) == ESTABLISHED
        finally:
            dead.close()


def test_a_live_client_stays_connected_across_many_ping_intervals(srv: ServerProcess) -> None:
    """The websockets client answers pings by itself: idle for 6 intervals, the stream still works."""
    q = "live-peer"
    with httpx.Client(base_url=srv.url) as api:
        ok(api.put(f"/api/v1/queues/{q}", json={}), 201)

    frames: list[str] = []

    class Frames(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            frames.append(record.getMessage())

    logger = logging.getLogger("tests.heartbeat.live")
    logger.setLevel(logging.DEBUG)  # websockets logs every frame at DEBUG
    logger.propagate = False
    logger.addHandler(Frames())

    async def main() -> None:
        # ping_interval=None: the client sends no pings of its own, so every ping comes from the server.
        async with open_ws(consume_url(srv, q, consumer="live"), ping_interval=None, logger=logger) as live:
            await send(live, type="credit", n=10)
            await asyncio.sleep(6 * PING)
            await synced(live)  # answered: the connection is open and the stream goes on
            async with httpx.AsyncClient(base_url=srv.url) as aapi:
                ok(await aapi.post(f"/api/v1/queues/{q}/publish", json={"messages": [{"body": "after"}]}))
            assert [m["body"] for m in (await recv(live))["messages"]] == ["after"]

    run(main())
    pings = [f for f in frames if f.startswith("< PING")]
    pongs = [f for f in frames if f.startswith("> PONG")]
    assert len(pings) >= 4 and len(pongs) == len(pings), frames  # pinged about every PING s, all answered
