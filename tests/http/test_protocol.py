"""`chunkmq serve`'s HTTP protocol (app/http/protocol.py) in process, on real sockets.

The hot routes answered without ASGI: each request is answered byte for byte as the same app
answers it through ASGI (whose hot path tests/api/test_hot_routes.py holds to the middleware stack's
answers), with the same access log line; pipelined requests, HTTP/1.0 and Expect: 100-continue keep
uvicorn's behaviour. The connection's clocks: headers sent too slowly, and keep-alive idleness.
(tests/http/test_connections.py checks the limits on a server process.)"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from chunkmq.api import streams
from chunkmq.broker.broker import Broker
from chunkmq.client._batch import decode, encode
from chunkmq.client.models import OutgoingMessage
from chunkmq.config import Settings
from chunkmq.http.server import uvicorn_options
from chunkmq.main import App, create_app
from tests.api.test_hot_routes import LOCAL_REFUSALS, PUBLISH, REFUSALS
from tests.server import free_port

Request = tuple[str, str, bytes, dict[str, str]]
OK: list[Request] = [
    ("POST", "/api/v1/queues/q/publish", PUBLISH, {"content-type": "application/json"}),
    ("POST", "/api/v1/exchanges/amq.default/publish?mandatory=true",
     orjson.dumps({"messages": [{"body": "x", "routing_key": "q"}], "mandatory": True}),
     {"content-type": "application/json"}),
    ("POST", "/api/v1/queues/q/groups/g/pull", b'{"max_messages": 1}', {"content-type": "application/json"}),
    ("POST", "/api/v1/queues/e/groups/g/pull", b"", {}),  # no body at all: the defaults (an empty queue)
    ("POST", "/api/v1/queues/q/publish", b"x" * 70_000, {"content-type": "application/json"}),  # large: ASGI
]


def raw(port: int, request: Request, version: str = "1.1") -> bytes:
    method, path, body, headers = request
    lines = [f"{method} {path} HTTP/{version}", f"host: 127.0.0.1:{port}", f"content-length: {len(body)}",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def answer(reader: asyncio.StreamReader) -> bytes:
    """One answer, its date header and the numbers that differ from server to server (offsets, ids)
    taken out."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    body = await reader.readexactly(length)
    return re.sub(rb"date: [^\r]*\r\n", b"", head) + re.sub(rb'"(id|offset|published_at|timestamp)":"?[0-9a-f]+"?',
                                                              rb'"\1":0', body)


async def exchange(port: int, data: bytes, answers: int = 1) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return [await answer(reader) for _ in range(answers)]
    finally:
        writer.close()


@asynccontextmanager
async def servers(settings: Settings, **options: object) -> AsyncIterator[tuple[App, int, int]]:
    """The app served twice: as itself (hot requests answered by the protocol) and wrapped in a
    plain ASGI function (the protocol finds no hot routes on it: every request goes through ASGI)."""
    app = create_app(settings)

    async def through_asgi(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)

    ports = free_port(), free_port()
    running = []
    for target, port, lifespan in ((app, ports[0], "on"), (through_asgi, ports[1], "off")):
        server = uvicorn.Server(uvicorn.Config(target, **{**uvicorn_options(settings), "port": port,  # type: ignore[arg-type]
                                                          "lifespan": lifespan, "log_config": None, **options}))
        running.append((server, asyncio.create_task(server.serve())))
        while not server.started:
            await asyncio.sleep(0.01)
    try:
        yield app, *ports
    finally:
        for server, task in reversed(running):
            server.should_exit = True
            await task


def test_hot_requests_are_answered_as_through_asgi(tmp_path: Path) -> None:
    lines: list[str] = []
    by_protocol: list[bool] = []  # whether the line came from the protocol's own path (app/http/protocol.py)
    handler = logging.Handler()

    def emit(record: logging.LogRecord) -> None:
        lines.append(record.getMessage().split(" - ", 1)[1])
        by_protocol.append(Path(record.pathname).name == "protocol.py")

    handler.emit = emit  # type: ignore[method-assign]
    access = logging.getLogger("uvicorn.access")
    access.addHandler(handler)

    async def main() -> None:
        settings = Settings(auth="off", data_dir=tmp_path / "data", log_level="info", access_log="all")
        async with servers(settings) as (_, hot, asgi):
            for path in ("/api/v1/queues/q", "/api/v1/queues/q/groups/g",
                         "/api/v1/queues/e", "/api/v1/queues/e/groups/g"):
                await exchange(hot, raw(hot, ("PUT", path, b"{}", {"content-type": "application/json"})))
            for request in [*REFUSALS, *LOCAL_REFUSALS, *OK]:
                lines.clear()
                by_protocol.clear()
                got = [await exchange(port, raw(port, request)) for port in (hot, asgi)]
                assert got[0] == got[1], request
                assert len(lines) == 2 and lines[0] == lines[1], (request, lines)
                small = len(request[2]) <= 65536 and "%" not in request[1]
                assert by_protocol == [small, False], request
            # HTTP/1.0: answered, then the connection closes
            got = [await exchange(port, raw(port, OK[0], "1.0")) for port in (hot, asgi)]
            assert got[0] == got[1] and b"connection: close" in got[0][0]
            # HTTP/1.0 asking for keep-alive (closed all the same), HTTP/1.1 asking to close: as through ASGI,
            # with the version in the log line
            method, path, body, headers = OK[0]
            for connection, version in (("keep-alive", "1.0"), ("close", "1.1")):
                lines.clear()
                request = (method, path, body, {**headers, "connection": connection})
                got = [await exchange(port, raw(port, request, version)) for port in (hot, asgi)]
                assert got[0] == got[1] and b"connection: close" in got[0][0]
                assert len(lines) == 2 and lines[0] == lines[1] and f"HTTP/{version}" in lines[0], lines
            # three pipelined requests (the second waits for the first), answered in order
            pipelined = [await exchange(port, raw(port, OK[0]) + raw(port, REFUSALS[1]) + raw(port, OK[2]), 3)
                         for port in (hot, asgi)]
            assert pipelined[0] == pipelined[1]
            assert [a.split(b"\r\n", 1)[0] for a in pipelined[0]] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request",
                                                                     b"HTTP/1.1 200 OK"]
            # Expect: 100-continue: uvicorn's path, its interim answer before the body is sent
            for port in (hot, asgi):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                method, path, body, headers = OK[0]
                writer.write(raw(port, (method, path, b"", {**headers, "expect": "100-continue"})).replace(
                    b"content-length: 0", b"content-length: %d" % len(body)))
                assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
                writer.write(body)
                assert (await answer(reader)).startswith(b"HTTP/1.1 200 OK")
                writer.close()

    try:
        asyncio.run(main())
    finally:
        access.removeHandler(handler)


def test_a_long_poll_is_woken_and_answered_by_the_protocol(tmp_path: Path) -> None:
    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q/groups/g", b"{}",
                                          {"content-type": "application/json"})))
            waiting = asyncio.create_task(exchange(hot, raw(hot, ("POST", "/api/v1/queues/q/groups/g/pull",
                                                                  b'{"wait_ms": 5000}', {}))))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await exchange(hot, raw(hot, OK[0]))
            [pulled] = await asyncio.wait_for(waiting, 2)
            assert pulled.startswith(b"HTTP/1.1 200 OK") and b'"body":"hello"' in pulled

    asyncio.run(main())


def test_a_shutdown_ends_a_waiting_long_poll_as_it_ends_any_request(tmp_path: Path) -> None:
    """A long poll parked outside any task (app/api/wake.py) becomes one at a shutdown: the server
    waits for it, then cancels it at its graceful timeout (uvicorn's 500) and stops."""
    async def main() -> None:
        settings = Settings(auth="off", data_dir=tmp_path / "data")
        async with servers(settings, timeout_graceful_shutdown=0.5) as (_, hot, _):
            for path in ("/api/v1/queues/q", "/api/v1/queues/q/groups/g"):  # the pull then waits at once
                await exchange(hot, raw(hot, ("PUT", path, b"{}", {"content-type": "application/json"})))
            reader, writer = await asyncio.open_connection("127.0.0.1", hot)
            writer.write(raw(hot, ("POST", "/api/v1/queues/q/groups/g/pull", b'{"wait_ms": 20000}', {})))
            await asyncio.sleep(0.2)
            started = asyncio.get_running_loop().time()
        # the servers are stopped now: the poll was answered and closed well before its 20 s
        assert asyncio.get_running_loop().time() - started < 5
        answered = await asyncio.wait_for(reader.read(), 5)
        assert answered.startswith(b"HTTP/1.1 500 ") and b"connection: close" in answered
        writer.close()

    asyncio.run(main())


def test_publishes_that_wait_are_answered_as_through_asgi(tmp_path: Path) -> None:
    """A publish starts at once in the parser's callback (app/http/protocol.py started_eagerly); one that
    waits, for its token's first lookup or for its fsync, goes on in a task."""
    async def main() -> None:
        settings = Settings(auth="on", fsync="always", data_dir=tmp_path / "data")
        async with servers(settings) as (_, hot, asgi):
            admin = {"authorization": f"Bearer {(settings.data_dir / 'admin-token').read_text().strip()}",
                     "content-type": "application/json"}
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", admin)))
            for _ in range(2):  # the token looked up, then known
                got = [await exchange(port, raw(port, ("POST", "/api/v1/queues/q/publish", PUBLISH, admin)))
                       for port in (hot, asgi)]
                assert got[0] == got[1] and got[0][0].startswith(b"HTTP/1.1 200 OK")
                assert b'"durability":"fsync"' in got[0][0]
            refused = [await exchange(port, raw(port, ("POST", "/api/v1/queues/q/publish", PUBLISH,
                                                       {**admin, "authorization": "Bearer cmq_wrong"})))
                       for port in (hot, asgi)]
            assert refused[0] == refused[1] and refused[0][0].startswith(b"HTTP/1.1 401")

    asyncio.run(main())


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), seconds) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_the_connection_s_clocks(tmp_path: Path) -> None:
    """Headers must be in within the header timeout of a request's first byte, whatever came before
    on the connection; an idle keep-alive connection closes after timeout_keep_alive; one that keeps
    sending requests stays open past both."""
    async def main() -> None:
        settings = Settings(auth="off", data_dir=tmp_path / "data", request_header_timeout_seconds=0.5)
        async with servers(settings, timeout_keep_alive=1) as (_, hot, _):
            for path in ("/api/v1/queues/q", "/api/v1/queues/q/groups/g"):  # the pull then waits at once
                await exchange(hot, raw(hot, ("PUT", path, b"{}", {"content-type": "application/json"})))
            reader, writer = await asyncio.open_connection("127.0.0.1", hot)
            started = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - started < 1.5:  # busy past both clocks
                writer.write(raw(hot, OK[0]))
                assert (await answer(reader)).startswith(b"HTTP/1.1 200 OK")
                await asyncio.sleep(0.1)
            writer.write(b"POST /api/v1/queues/q/publish HTTP/1.1\r\nhost: 127.0.0.1\r\n")  # never ends
            assert not await closed_within(reader, 0.3)
            assert await closed_within(reader, 1)  # aborted at the header timeout
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", hot)
            writer.write(raw(hot, OK[0]))
            assert (await answer(reader)).startswith(b"HTTP/1.1 200 OK")
            assert not await closed_within(reader, 0.7)
            assert await closed_within(reader, 1)  # idle past timeout_keep_alive
            writer.close()

    asyncio.run(main())


def test_a_hot_answer_carries_the_server_s_current_date(tmp_path: Path) -> None:
    """The head of a hot answer is made once a second (HttpProtocol._head), not per answer: it still
    carries the date uvicorn's clock gives, as an answer through ASGI does."""
    async def date_of(port: int) -> datetime:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw(port, OK[0]))
        head = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        assert head.startswith(b"HTTP/1.1 200 OK")
        return parsedate_to_datetime(re.search(rb"date: ([^\r]*)\r\n", head).group(1).decode())  # type: ignore[union-attr]

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, asgi):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            dates = []
            for _ in range(2):
                now = datetime.now(UTC)
                got = [await date_of(port) for port in (hot, asgi)]
                assert all(abs((date - now).total_seconds()) <= 2 for date in got), (now, got)
                dates.append(got[0])
                await asyncio.sleep(2.1)
            assert dates[1] > dates[0]

    asyncio.run(main())


def test_publish_stream_frames_are_published_and_confirmed_by_the_protocol(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish-stream frame with nothing ahead of it is handled in the protocol's callback (the
    stream's FRAME_HOOK), not by the reader task; frames sent in a burst, and frames that end the
    stream, still go the reader's way, and every confirm comes back in frame order."""
    received: list[int] = []  # each time the reader asks for a frame
    receive = streams._receive

    async def counted(*args: Any) -> Any:
        received.append(1)
        return await receive(*args)

    monkeypatch.setattr(streams, "_receive", counted)

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            url = f"ws://127.0.0.1:{hot}/api/v1/exchanges/amq.default/stream"
            async with connect(url, compression=None) as ws:
                for seq in range(20):  # one at a time: each one by the protocol
                    await ws.send(orjson.dumps({"type": "publish", "seq": seq,
                                                "messages": [{"body": f"m{seq}", "routing_key": "q"}]}))
                    confirm = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
                    assert (confirm["type"], confirm["seq"]) == ("confirm", seq)
                    assert confirm["results"][0]["routed"][0]["offset"] == seq
                await ws.send(b'{"type": "ping"}')
                assert orjson.loads(await asyncio.wait_for(ws.recv(), 5)) == {"type": "pong"}
                assert len(received) == 1  # the reader has waited for its first frame all along
                burst = [orjson.dumps({"type": "publish", "seq": seq,
                                       "messages": [{"body": f"m{seq}", "routing_key": "q"}]})
                         for seq in range(20, 220)]
                for frame in burst:  # all of them before reading any confirm
                    await ws.send(frame)
                answers = [orjson.loads(await asyncio.wait_for(ws.recv(), 5)) for _ in burst]
                assert [(a["seq"], a["results"][0]["routed"][0]["offset"]) for a in answers] == [
                    (seq, seq) for seq in range(20, 220)]
                await ws.send("not json")  # ends the stream as through the reader: 1007
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 5)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
            async with connect(url + "?format=binary", compression=None) as ws:
                for seq in (1, 2, 3):
                    await ws.send(encode([OutgoingMessage(f"b{seq}", routing_key="q")]))
                    confirm = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
                    assert (confirm["seq"], confirm["results"][0]["routed"][0]["offset"]) == (seq, 219 + seq)
            pulled = await exchange(hot, raw(hot, ("POST", "/api/v1/queues/q/groups/g/pull",
                                                   b'{"max_messages": 1000}', {})))
            bodies = re.findall(rb'"body":"([^"]*)"', pulled[0])
            assert bodies == [f"m{i}".encode() for i in range(220)] + [b"b1", b"b2", b"b3"]

    asyncio.run(main())


def test_consume_stream_control_frames_are_applied_by_the_protocol(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credit, ack, nack and ping frames are applied in the protocol's callback (the stream's
    FRAME_HOOK), answered as through the reader; a close frame still goes the reader's way."""
    received: list[int] = []
    receive = streams._receive

    async def counted(*args: Any) -> Any:
        received.append(1)
        return await receive(*args)

    monkeypatch.setattr(streams, "_receive", counted)
    publish = ("POST", "/api/v1/queues/q/publish", b'{"messages": [{"body": "m"}]}',
               {"content-type": "application/json"})

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            url = f"ws://127.0.0.1:{hot}/api/v1/queues/q/groups/g/stream?consumer=c1"
            async with connect(url, compression=None) as ws:
                async def frame() -> Any:
                    return orjson.loads(await asyncio.wait_for(ws.recv(), 5))

                await ws.send(b'{"type": "credit", "n": 3}')  # may come before the stream waits for frames
                await exchange(hot, raw(hot, publish))
                assert (await frame())["messages"][0]["offset"] == 0
                waited = len(received)
                for offset in range(1, 3):
                    await exchange(hot, raw(hot, publish))
                    [message] = (await frame())["messages"]
                    assert (message["offset"], message["delivery_count"]) == (offset, 1)
                await ws.send(orjson.dumps({"type": "nack", "offsets": [1]}))  # redelivered once credit comes
                await ws.send(orjson.dumps({"type": "ack", "offsets": [0, 2], "seq": 7}))
                assert await frame() == {"type": "acked", "seq": 7, "ack_floor": 1}
                await ws.send(b'{"type": "credit", "n": 1}')
                [message] = (await frame())["messages"]
                assert (message["offset"], message["delivery_count"]) == (1, 2)
                await ws.send(b'{"type": "ping"}')
                assert await frame() == {"type": "pong"}
                await ws.send(b'{"type": "credit", "n": 0}')
                error = await frame()
                assert error["type"] == "error" and error["error"]["code"] == "invalid_body"
                assert len(received) == waited  # the reader has waited for a frame all along
                await ws.send(b'{"type": "close", "requeue": true}')
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 5)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
            # the close frame went to the reader that waited for it: the stream closed, requeueing
            pulled = await exchange(hot, raw(hot, ("POST", "/api/v1/queues/q/groups/g/pull", b"", {})))
            assert b'"delivery_count":3' in pulled[0]  # offset 1, requeued at the close (offsets read as 0)

    asyncio.run(main())


def test_a_delivery_to_a_waiting_consumer_and_a_confirm_are_written_by_the_protocol(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frames a publish-stream frame causes, the delivery to a consume stream that waits and the
    confirm, are written by the protocol (FRAME_WRITE) in the frame's callback, not through the ASGI
    send: the same frames, the delivery first. A frame the protocol cannot write at once (writing
    paused) goes through the ASGI send, after what is already on its way. The stream's sender, parked
    while the push delivers, is not woken to look again."""
    sent: list[bytes] = []  # frames that went through the ASGI send
    send_frame = streams.send_frame

    async def counted(websocket: Any, frame: bytes, text: bool) -> None:
        sent.append(frame)
        await send_frame(websocket, frame, text)

    monkeypatch.setattr(streams, "send_frame", counted)
    writers: list[Any] = []
    hook = streams._ConsumeStream._hook

    def seen(stream: Any, data: bytes, text: bool) -> bool:
        writers.append(stream.ws.scope[streams.FRAME_WRITE])
        return hook(stream, data, text)

    monkeypatch.setattr(streams._ConsumeStream, "_hook", seen)
    looks: list[int] = []  # deliveries tried, by the push or by the stream's sender
    deliver = Broker.deliver

    def counted_deliver(self: Broker, *args: Any, **kwargs: Any) -> list[bytes]:
        looks.append(1)
        return deliver(self, *args, **kwargs)

    monkeypatch.setattr(Broker, "deliver", counted_deliver)

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            base = f"ws://127.0.0.1:{hot}/api/v1"
            async with (connect(f"{base}/queues/q/groups/g/stream?consumer=c1&format=binary", compression=None)
                        as consumer,
                        connect(f"{base}/exchanges/amq.default/stream?format=binary", compression=None) as producer):
                await consumer.send(b'{"type": "credit", "n": 10}')
                await asyncio.sleep(0.2)  # the consume stream takes its credit and waits for messages
                await consumer.send(b'{"type": "ping"}')  # by the hook: the reader waits for frames by now
                assert orjson.loads(await asyncio.wait_for(consumer.recv(), 5)) == {"type": "pong"}
                looked = len(looks)
                for seq in (1, 2, 3):
                    await producer.send(encode([OutgoingMessage(f"m{seq}", routing_key="q")]))
                    confirm = orjson.loads(await asyncio.wait_for(producer.recv(), 5))
                    assert (confirm["seq"], confirm["results"][0]["routed"][0]["offset"]) == (seq, seq - 1)
                    [message] = decode(await asyncio.wait_for(consumer.recv(), 5), "q")
                    assert (message.offset, message.body) == (seq - 1, f"m{seq}")
                    await asyncio.sleep(0.01)  # time for the sender to look too, if it were woken
                assert sent == []
                assert len(looks) - looked == 3  # one each, by the push: the parked sender was not woken
                protocol = writers[0].__self__
                protocol.pause_writing()  # as the transport does when its buffer is full
                await producer.send(encode([OutgoingMessage("m4", routing_key="q")]))
                await asyncio.sleep(0.1)
                assert len(sent) == 1  # the delivery waits in the ASGI send, the publish is not held up
                protocol.resume_writing()
                [message] = decode(await asyncio.wait_for(consumer.recv(), 5), "q")
                assert (message.offset, message.body) == (3, "m4")
                assert orjson.loads(await asyncio.wait_for(producer.recv(), 5))["seq"] == 4

    asyncio.run(main())


def test_a_chunk_that_is_one_whole_frame_goes_to_the_hook_without_websockets_parser(
        tmp_path: Path, websockets_parsed: Callable[[type[Protocol]], list[bytes]]) -> None:
    """The protocol hands a chunk that is exactly one whole data frame to the stream's FRAME_HOOK
    itself; frames cut across chunks, several in one chunk, fragmented messages and pings go
    through websockets as before, and the protocol keeps finding where the next frame starts."""
    parsed = websockets_parsed(ServerProtocol)  # chunks websockets' parser was given

    def publish(seq: int, body: str) -> bytes:
        return orjson.dumps({"type": "publish", "seq": seq, "messages": [{"body": body, "routing_key": "q"}]})

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            client = ClientProtocol(parse_uri(f"ws://127.0.0.1:{hot}/api/v1/exchanges/amq.default/stream"))
            reader, writer = await asyncio.open_connection("127.0.0.1", hot)
            client.send_request(client.connect())
            writer.write(b"".join(client.data_to_send()))
            events: list[Any] = []

            async def frames(n: int) -> list[Any]:
                while len(events) < n:
                    client.receive_data(await asyncio.wait_for(reader.read(65536), 5))
                    events.extend(e for e in client.events_received() if isinstance(e, Frame))
                got = [orjson.loads(e.data) for e in events[:n]]
                del events[:n]
                return got

            def wire(*texts: bytes) -> bytes:
                for text in texts:
                    client.send_text(text)
                return b"".join(client.data_to_send())

            while client.state is not State.OPEN:
                client.receive_data(await asyncio.wait_for(reader.read(65536), 5))
            client.events_received()
            await asyncio.sleep(0.1)  # the stream's reader waits for frames: its hook is in place
            before = len(parsed)
            for seq in range(5):  # one whole frame per chunk: none of them parsed by websockets
                writer.write(wire(publish(seq, f"m{seq}")))
                assert [a["seq"] for a in await frames(1)] == [seq]
            assert len(parsed) == before
            cut = wire(publish(5, "m5" * 100))  # a 16-bit length
            for part in (cut[:20], cut[20:50], cut[50:]):  # cut within its payload
                writer.write(part)
                await asyncio.sleep(0.02)
            writer.write(wire(publish(6, "m6"), publish(7, "m7")))  # two in one chunk
            client.send_frame(Frame(Opcode.TEXT, publish(8, "m8")[:10], fin=False))  # a fragmented message
            client.send_frame(Frame(Opcode.CONT, publish(8, "m8")[10:]))
            writer.write(b"".join(client.data_to_send()))
            assert [a["seq"] for a in await frames(4)] == [5, 6, 7, 8]
            client.send_ping(b"p")
            writer.write(b"".join(client.data_to_send()))
            await asyncio.sleep(0.1)
            client.receive_data(await asyncio.wait_for(reader.read(65536), 5))
            assert any(e.opcode is Opcode.PONG for e in client.events_received())
            parsed_so_far = len(parsed)
            for seq in range(9, 12):  # whole frames again: the protocol still knows where they start
                writer.write(wire(publish(seq, f"m{seq}")))
                assert [a["seq"] for a in await frames(1)] == [seq]
            assert len(parsed) == parsed_so_far
            cut = wire(publish(12, "m12"))
            writer.write(cut[:1])  # a header cut: where frames start is lost, websockets parses the rest
            await asyncio.sleep(0.02)
            writer.write(cut[1:])
            for seq in range(13, 15):
                writer.write(wire(publish(seq, f"m{seq}")))
            assert [a["seq"] for a in await frames(3)] == [12, 13, 14]
            writer.close()
            pulled = await exchange(hot, raw(hot, ("POST", "/api/v1/queues/q/groups/g/pull",
                                                   b'{"max_messages": 100}', {})))
            bodies = re.findall(rb'"body":"([^"]*)"', pulled[0])
            assert bodies == [f"m{i}".encode() if i != 5 else b"m5" * 100 for i in range(15)]

    asyncio.run(main())


def test_an_upgrade_websockets_refuses_is_answered_and_bytes_after_it_change_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", hot)
            writer.write(f"GET /api/v1/exchanges/amq.default/stream HTTP/1.1\r\nhost: 127.0.0.1:{hot}\r\n"
                         "upgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\n\r\n".encode())
            await asyncio.sleep(0.05)  # no key: refused
            writer.write(bytes([0x82, 0x80]) + b"kkkk")  # a frame, as if it were open
            answer = await asyncio.wait_for(reader.read(65536), 5)
            assert answer.startswith(b"HTTP/1.1 400")
            writer.close()

    asyncio.run(main())


def test_an_upgrade_behind_an_unanswered_request_and_a_half_close_wait_for_the_answer(tmp_path: Path) -> None:
    """A long poll still waiting when the upgrade pipelined behind it is read: the poll's answer comes
    first, then the 101, hot and through ASGI. A client that shuts down its sending side behind a
    waiting long poll still gets its answer, then the close."""
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    poll = ("POST", "/api/v1/queues/q/groups/p/pull", b'{"max_messages": 1, "wait_ms": 200}',
            {"content-type": "application/json"})

    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data")) as (_, hot, asgi):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", {"content-type": "application/json"})))
            for port in (hot, asgi):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw(port, poll) + (
                    f"GET /api/v1/queues/q/groups/g/stream HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nupgrade: websocket\r\n"
                    f"connection: Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n\r\n").encode())
                assert (await answer(reader)).endswith(b'{"messages":[]}')
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101 ")
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw(port, poll))
                writer.write_eof()
                got = await answer(reader)
                assert got.endswith(b'{"messages":[]}') and b"connection: close" in got, got
                assert await asyncio.wait_for(reader.read(), 5) == b""
                writer.close()

    asyncio.run(main())
