"""WebSocket streams against a real server over real sockets: credit, push latency, redelivery,
sharing a group with HTTP consumers, bad frames, auth, and the pipelined publish stream."""

from __future__ import annotations

import asyncio
import select
import socket
import statistics
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from chunkmq.client._batch import decode, encode
from chunkmq.client.models import Message, OutgoingMessage
from tests.api.client import ok
from tests.api.test_auth import create_token
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # A small batch limit, so the publish stream's size limit is cheap to hit.
    data = Path(tmp_path_factory.mktemp("streams")) / "data"
    proc = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_MAX_BATCH_BYTES="65536").start()
    yield proc
    proc.stop()


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def consume_url(server: ServerProcess, q: str, g: str = "g", **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"ws://127.0.0.1:{server.port}/api/v1/queues/{q}/groups/{g}/stream" + (f"?{query}" if query else "")


def publish_url(server: ServerProcess, exchange: str = "amq.default", token: str | None = None) -> str:
    return f"ws://127.0.0.1:{server.port}/api/v1/exchanges/{exchange}/stream" + (f"?token={token}" if token else "")


def open_ws(url: str, **kwargs: Any) -> Any:
    return connect(url, compression=None, **kwargs)


async def send(ws: ClientConnection, **frame: Any) -> None:
    await ws.send(orjson.dumps(frame))


async def recv(ws: ClientConnection, timeout: float = 5.0) -> dict[str, Any]:
    frame: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
    return frame


async def messages_until_quiet(ws: ClientConnection, quiet: float = 0.3) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        try:
            frame = await recv(ws, quiet)
        except TimeoutError:
            return out
        assert frame["type"] == "messages", frame
        out.extend(frame["messages"])


async def synced(ws: ClientConnection) -> None:
    """Frames are handled in order: once the pong is back, everything sent before it was applied."""
    await send(ws, type="ping")
    while (await recv(ws))["type"] != "pong":
        pass


def fill(server: ServerProcess, q: str, n: int, **settings: Any) -> None:
    with httpx.Client(base_url=server.url) as api:
        ok(api.put(f"/api/v1/queues/{q}", json=settings), 201)
        for start in range(0, n, 200):
            body = {"messages": [{"body": str(i), "routing_key": q} for i in range(start, min(n, start + 200))]}
            ok(api.post("/api/v1/exchanges/amq.default/publish", json=body))


def group_info(server: ServerProcess, q: str, g: str = "g") -> dict[str, Any]:
    return dict(ok(httpx.get(f"{server.url}/api/v1/queues/{q}/groups/{g}")))


async def closed_with(ws: ClientConnection) -> int:
    with pytest.raises(ConnectionClosed) as info:
        for _ in range(10):
            await recv(ws)
    assert info.value.rcvd is not None
    return info.value.rcvd.code


# ----------------------------------------------------------------------------------- consume


def test_credit_is_respected_exactly(srv: ServerProcess) -> None:
    fill(srv, "credit", 50)

    async def main() -> None:
        async with open_ws(consume_url(srv, "credit")) as ws:
            assert await messages_until_quiet(ws, 0.2) == []  # no credit, nothing
            await send(ws, type="credit", n=7)
            got = await messages_until_quiet(ws)
            assert [m["offset"] for m in got] == list(range(7))
            assert got[0]["body"] == "0" and got[0]["delivery_count"] == 1 and got[0]["queue"] == "credit"
            await send(ws, type="credit", n=3)
            assert [m["offset"] for m in await messages_until_quiet(ws)] == [7, 8, 9]
            await send(ws, type="ack", up_to=10)
            await synced(ws)
            assert group_info(srv, "credit")["ack_floor"] == 10
            await send(ws, type="credit", n=1000)
            assert [m["offset"] for m in await messages_until_quiet(ws)] == list(range(10, 50))
            await send(ws, type="ack", offsets=list(range(10, 50)))
            await synced(ws)
        info = group_info(srv, "credit")
        assert (info["ack_floor"], info["in_flight"]) == (50, 0)

    run(main())


def test_a_publish_reaches_a_waiting_consumer_in_under_10_ms(srv: ServerProcess) -> None:
    fill(srv, "push", 0)

    async def main() -> None:
        async with open_ws(consume_url(srv, "push")) as ws, httpx.AsyncClient(base_url=srv.url) as api:
            await send(ws, type="credit", n=1000)
            await synced(ws)
            latencies, publishes = [], []
            for i in range(30):
                await asyncio.sleep(0.01)  # the consumer is parked waiting
                started = time.perf_counter()
                await api.post("/api/v1/queues/push/publish", json={"messages": [{"body": str(i)}]})
                publishes.append(time.perf_counter() - started)
                frame = await recv(ws)
                latencies.append(time.perf_counter() - started)
                assert [m["body"] for m in frame["messages"]] == [str(i)]
                await send(ws, type="ack", offsets=[i])
        # Medians, against scheduling noise. The publish's own round trip is inside each latency and
        # grows with the machine's other load (the other test worker): the push itself must add less
        # than 10 ms to it (about 1 ms on an idle machine; a polling consumer would add its interval).
        assert statistics.median(latencies) < statistics.median(publishes) + 0.010, (latencies, publishes)

    run(main())


def test_a_publish_is_written_to_a_waiting_consumer_before_its_confirm(srv: ServerProcess) -> None:
    """The waiting consumer gets the message inside the publish, ahead of the publisher's confirm
    (loopback hands a write over before it returns): the moment the confirm can be read, so can the
    message. Neither socket is read by the client library meanwhile; the test watches both."""
    fill(srv, "ahead", 0)

    async def main() -> None:
        async with (open_ws(consume_url(srv, "ahead")) as consumer,
                    open_ws(publish_url(srv) + "?format=binary") as producer):  # as the client's Producer
            await send(consumer, type="credit", n=1000)
            await synced(consumer)
            csock = consumer.transport.get_extra_info("socket")
            psock = producer.transport.get_extra_info("socket")
            for i in range(20):
                consumer.transport.pause_reading()
                producer.transport.pause_reading()
                await asyncio.sleep(0.005)  # the server's sender is parked, waiting
                await producer.send(encode([str(i)], "ahead"))
                readable: list[Any] = []
                while psock not in readable:  # blocks the loop, on purpose: nothing else may read
                    readable = select.select([psock, csock], [], [], 5)[0]
                    assert readable, "no confirm within 5 s"
                assert csock in readable, f"publish {i}: confirmed before it was delivered"
                consumer.transport.resume_reading()
                producer.transport.resume_reading()
                assert (await recv(producer))["seq"] == i + 1
                assert [m["body"] for m in (await recv(consumer))["messages"]] == [str(i)]

    run(main())


def test_an_http_publish_is_written_to_a_waiting_consumer_before_its_answer(srv: ServerProcess) -> None:
    """A waiting consumer stream is handed the message inside the publish (Queue.push_to), not a
    loop turn later: an HTTP publish, answered in the same call, finds the message written first."""
    fill(srv, "ahead-http", 0)

    async def main() -> None:
        async with open_ws(consume_url(srv, "ahead-http")) as consumer:
            await send(consumer, type="credit", n=1000)
            await synced(consumer)
            csock = consumer.transport.get_extra_info("socket")
            with socket.create_connection(("127.0.0.1", srv.port)) as http:
                for i in range(20):
                    consumer.transport.pause_reading()
                    await asyncio.sleep(0.005)  # the server's sender is parked, waiting
                    body = orjson.dumps({"messages": [{"body": str(i)}]})
                    http.sendall(b"POST /api/v1/queues/ahead-http/publish HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                                 b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
                    readable: list[Any] = []
                    while http not in readable:  # blocks the loop, on purpose: nothing else may read
                        readable = select.select([http, csock], [], [], 5)[0]
                        assert readable, "no answer within 5 s"
                    assert http.recv(65536).startswith(b"HTTP/1.1 200")
                    assert csock in readable, f"publish {i}: answered before it was delivered"
                    consumer.transport.resume_reading()
                    assert [m["body"] for m in (await recv(consumer))["messages"]] == [str(i)]

    run(main())


def test_killing_the_socket_mid_stream_leads_to_redelivery(srv: ServerProcess) -> None:
    fill(srv, "killed", 8, ack_timeout_ms=400)

    async def main() -> None:
        async with open_ws(consume_url(srv, "killed", consumer="c1")) as ws:
            await send(ws, type="credit", n=5)
            first = (await recv(ws))["messages"]
            delivered = time.monotonic()
            first += await messages_until_quiet(ws, 0.1)
            assert [m["offset"] for m in first] == [0, 1, 2, 3, 4]
            ws.transport.abort()  # no close frame: the peer just vanishes
        async with open_ws(consume_url(srv, "killed", consumer="c2")) as ws:
            await send(ws, type="credit", n=100)
            seen: dict[int, int] = {}
            while len(seen) < 8:
                for m in (await recv(ws))["messages"]:
                    seen[m["offset"]] = m["delivery_count"]
                    if m["offset"] < 5:
                        assert time.monotonic() - delivered > 0.35  # after the ack timeout, not before
            assert seen == {0: 2, 1: 2, 2: 2, 3: 2, 4: 2, 5: 1, 6: 1, 7: 1}

    run(main())


def test_clean_close_requeues_at_once_only_when_asked(srv: ServerProcess) -> None:
    fill(srv, "requeue", 6, ack_timeout_ms=60_000)

    async def take(consumer: str, n: int, close: dict[str, Any] | None) -> list[dict[str, Any]]:
        async with open_ws(consume_url(srv, "requeue", consumer=consumer)) as ws:
            await send(ws, type="credit", n=n)
            got = await messages_until_quiet(ws, 0.3)
            if close is not None:
                await send(ws, **close)
                assert await closed_with(ws) == 1000
            return got

    async def main() -> None:
        assert len(await take("a", 3, {"type": "close", "requeue": True})) == 3
        again = await take("b", 3, {"type": "close"})  # no requeue: b's messages wait for the timeout
        assert [(m["offset"], m["delivery_count"]) for m in again] == [(0, 2), (1, 2), (2, 2)]
        rest = await take("c", 10, None)
        assert [(m["offset"], m["delivery_count"]) for m in rest] == [(3, 1), (4, 1), (5, 1)]

    run(main())


def test_stream_and_http_consumers_share_a_group_without_duplicates(srv: ServerProcess) -> None:
    total = 3000
    fill(srv, "shared", total)
    seen: dict[str, list[int]] = {"s1": [], "s2": [], "http": []}

    async def stream_consumer(name: str) -> None:
        async with open_ws(consume_url(srv, "shared", consumer=name)) as ws:
            await send(ws, type="credit", n=50)
            while sum(map(len, seen.values())) < total:
                try:
                    frame = await recv(ws, 0.5)
                except TimeoutError:
                    continue
                offsets = [m["offset"] for m in frame["messages"]]
                seen[name].extend(offsets)
                await send(ws, type="ack", offsets=offsets)
                await send(ws, type="credit", n=len(offsets))

    async def http_consumer() -> None:
        async with httpx.AsyncClient(base_url=srv.url) as api:
            while sum(map(len, seen.values())) < total:
                pulled = ok(await api.post("/api/v1/queues/shared/groups/g/pull",
                                           json={"max_messages": 50, "wait_ms": 200, "consumer": "http"}))
                offsets = [m["offset"] for m in pulled["messages"]]
                seen["http"].extend(offsets)
                if offsets:
                    ok(await api.post("/api/v1/queues/shared/groups/g/ack", json={"offsets": offsets}))

    async def main() -> None:
        await asyncio.gather(stream_consumer("s1"), stream_consumer("s2"), http_consumer())

    run(main())
    everything = [o for offsets in seen.values() for o in offsets]
    assert sorted(everything) == list(range(total))  # each exactly once: the ack timeout never ran out
    assert all(seen.values()), {k: len(v) for k, v in seen.items()}
    info = group_info(srv, "shared")
    assert (info["ack_floor"], info["in_flight"]) == (total, 0)


def test_bad_frames_get_error_frames_and_the_stream_goes_on(srv: ServerProcess) -> None:
    fill(srv, "badframes", 3)

    async def main() -> None:
        async with open_ws(consume_url(srv, "badframes")) as ws:
            for frame in ([], {"no": "type"}, {"type": "credit", "n": 0}, {"type": "credit", "n": "5"},
                          {"type": "ack"}, {"type": "nack", "offsets": [-1]}, {"type": "close", "requeue": 1},
                          {"type": "teleport"}):
                await ws.send(orjson.dumps(frame))
                answer = await recv(ws)
                assert answer["type"] == "error" and answer["error"]["code"] == "invalid_body", (frame, answer)
                assert answer["error"]["message"]
            await ws.send('{"type": "credit", "n": 2}')  # text frames are fine too
            assert [m["offset"] for m in await messages_until_quiet(ws, 0.2)] == [0, 1]
            await send(ws, type="ping")
            assert await recv(ws) == {"type": "pong"}

    run(main())


NOT_OBJECTS = (b"null", b"1", b'"x"', b"[1]", b"true")


def test_a_frame_that_is_not_an_object_gets_invalid_body_on_both_streams(srv: ServerProcess) -> None:
    fill(srv, "notobjects", 1)

    async def main() -> None:
        for url in (consume_url(srv, "notobjects"), publish_url(srv)):
            async with open_ws(url) as ws:
                for frame in NOT_OBJECTS:
                    await ws.send(frame)
                    answer = await recv(ws)
                    assert answer["type"] == "error" and answer["error"]["code"] == "invalid_body", (url, frame)
                    assert "JSON object" in answer["error"]["message"]
                await send(ws, type="ping")
                assert await recv(ws) == {"type": "pong"}, url  # the stream is still usable

    run(main())


def test_both_streams_check_their_frames_and_query_as_strictly_as_rest_bodies(srv: ServerProcess) -> None:
    fill(srv, "strictframes", 1)

    async def main() -> None:
        async with open_ws(consume_url(srv, "strictframes")) as ws:
            for frame in ({"type": "ack", "up_to": 0, "seq": "x"}, {"type": "ack", "up_to": 0, "seq": -1},
                          {"type": "ping", "x": 1}, {"type": "ack", "up_to": 0, "extra": True}):
                await send(ws, **frame)
                answer = await recv(ws)
                assert answer["type"] == "error" and answer["error"]["code"] == "invalid_body", (frame, answer)
            await send(ws, type="ack", up_to=0, seq=7)
            assert (await recv(ws))["seq"] == 7
        async with open_ws(publish_url(srv)) as ws:
            for frame in ({"type": "ping", "x": 1}, {"type": "publish", "seq": "x", "messages": [{"body": "x"}]}):
                await send(ws, **frame)
                answer = await recv(ws)
                assert answer["type"] == "error" and answer["error"]["code"] == "invalid_body", (frame, answer)
        for resume in ("maybe", "1", ""):
            async with open_ws(consume_url(srv, "strictframes", resume=resume)) as ws:
                frame = await recv(ws)
                assert frame["error"]["code"] == "invalid_request" and "resume" in frame["error"]["message"]
                assert await closed_with(ws) == 4400
        async with open_ws(consume_url(srv, "strictframes", resume="true")) as ws:
            await synced(ws)

    run(main())


def test_a_binary_stream_sends_batches_in_binary_frames_and_the_rest_as_text(srv: ServerProcess) -> None:
    fill(srv, "binstream", 30)
    with httpx.Client(base_url=srv.url) as api:  # a message with every optional field
        ok(api.post("/api/v1/queues/binstream/publish", json={"messages": [
            {"body_base64": "3q2+7w==", "headers": {"h": "v"}, "tag": "t"}]}))

    async def main() -> None:
        async with open_ws(consume_url(srv, "binstream", "b", format="binary")) as binary, \
                open_ws(consume_url(srv, "binstream", "j")) as json:
            assert await messages_until_quiet(binary, 0.2) == []  # no credit, nothing
            await send(binary, type="credit", n=7)
            raw = await asyncio.wait_for(binary.recv(), 5)
            assert isinstance(raw, bytes)
            assert [m.offset for m in decode(raw, "binstream")] == list(range(7))  # exactly the credit
            await send(binary, type="credit", n=1000)
            got = []
            while len(got) < 24:
                frame = await asyncio.wait_for(binary.recv(), 5)
                assert isinstance(frame, bytes)
                got.extend(decode(frame, "binstream"))
            await send(json, type="credit", n=1000)
            expected = [Message.from_json(m) for m in await messages_until_quiet(json)]
            assert decode(raw, "binstream") + got == expected  # the same messages as the JSON stream
            assert got[-1].headers == {"h": "v"} and got[-1].tag == "t" and got[-1].body == b"\xde\xad\xbe\xef"
            # every other frame is a text frame of JSON
            await send(binary, type="ping")
            assert await asyncio.wait_for(binary.recv(), 5) == '{"type":"pong"}'
            await send(binary, type="ack", up_to=31, seq=1)
            acked = await asyncio.wait_for(binary.recv(), 5)
            assert isinstance(acked, str) and orjson.loads(acked) == {"type": "acked", "seq": 1, "ack_floor": 31}
            await send(binary, type="credit", n=0)
            error = await asyncio.wait_for(binary.recv(), 5)
            assert isinstance(error, str) and orjson.loads(error)["error"]["code"] == "invalid_body"
        async with open_ws(consume_url(srv, "binstream", "b", format="xml")) as ws:
            frame = await recv(ws)
            assert frame["error"]["code"] == "invalid_request" and "format" in frame["error"]["message"]
            assert await closed_with(ws) == 4400

    run(main())


def test_non_json_and_oversized_frames_close_with_documented_codes(srv: ServerProcess) -> None:
    fill(srv, "closing", 0)

    async def main() -> None:
        async with open_ws(consume_url(srv, "closing")) as ws:
            await ws.send("{not json")
            assert await closed_with(ws) == 1007
        async with open_ws(consume_url(srv, "closing")) as ws:
            await ws.send(b" " * (1024 * 1024 + 1))
            assert await closed_with(ws) == 1009
        async with open_ws(publish_url(srv)) as ws:
            await ws.send(b" " * 65537)  # over CHUNKMQ_MAX_BATCH_BYTES
            assert await closed_with(ws) == 1009

    run(main())


def test_streams_that_cannot_open_or_go_on_say_why(srv: ServerProcess) -> None:
    fill(srv, "refused", 0)

    async def refused(url: str, code: str, close: int) -> None:
        async with open_ws(url) as ws:
            frame = await recv(ws)
            assert frame["type"] == "error" and frame["error"]["code"] == code, frame
            assert await closed_with(ws) == close

    async def main() -> None:
        await refused(consume_url(srv, "nope"), "queue_not_found", 4404)
        await refused(consume_url(srv, "refused", "bad%20name"), "invalid_name", 4400)
        await refused(publish_url(srv, "no-such-exchange"), "exchange_not_found", 4404)
        async with open_ws(consume_url(srv, "refused", "doomed")) as ws:
            await send(ws, type="credit", n=10)
            await synced(ws)
            httpx.delete(f"{srv.url}/api/v1/queues/refused/groups/doomed").raise_for_status()
            httpx.post(f"{srv.url}/api/v1/queues/refused/publish", json={"messages": [{"body": "x"}]})
            frame = await recv(ws)
            assert frame["type"] == "error" and frame["error"]["code"] == "group_not_found", frame
            assert await closed_with(ws) == 4404

    run(main())


def test_no_permission_no_stream(tmp_path: Path) -> None:
    secured = ServerProcess(tmp_path / "data").start()
    try:
        admin = (secured.data_dir / "admin-token").read_text().strip()
        reader = create_token(secured.data_dir, "--name", "reader", "--read", "^mine$", "--write", "^mine$")
        with httpx.Client(base_url=secured.url, headers={"authorization": f"Bearer {admin}"}) as api:
            for q in ("mine", "theirs"):
                ok(api.put(f"/api/v1/queues/{q}", json={}), 201)

        async def refused(url: str, code: str, close: int, headers: dict[str, str] | None = None) -> None:
            async with open_ws(url, additional_headers=headers) as ws:
                assert (await recv(ws))["error"]["code"] == code
                assert await closed_with(ws) == close

        async def main() -> None:
            await refused(consume_url(secured, "mine"), "unauthorized", 4401)
            await refused(consume_url(secured, "mine", token="wrong"), "unauthorized", 4401)
            await refused(consume_url(secured, "theirs", token=reader), "forbidden", 4403)
            await refused(publish_url(secured, token=reader), "forbidden", 4403)  # amq.default: not "mine"
            bearer = {"authorization": f"Bearer {reader}"}
            async with open_ws(consume_url(secured, "mine"), additional_headers=bearer) as ws:
                await synced(ws)
            async with open_ws(consume_url(secured, "mine", token=reader)) as ws:
                await synced(ws)

        run(main())
    finally:
        secured.stop()


# ----------------------------------------------------------------------------------- publish


def test_publish_stream_pipelines_and_confirms_in_order(srv: ServerProcess) -> None:
    fill(srv, "pipelined", 0)

    async def main() -> None:
        async with open_ws(publish_url(srv)) as ws:
            frames: list[dict[str, Any]] = []
            for seq in range(40):
                messages = [{"body": f"{seq}-{i}", "routing_key": "pipelined"} for i in range(5)]
                if seq == 10:
                    messages.append({"body": 7})  # invalid: the whole frame is refused, nothing stored
                if seq == 20:
                    messages = [{"body": "x", "routing_key": "nowhere"}]
                if seq == 30:
                    messages[0]["idempotency_key"] = "k-1"
                if seq == 31:
                    messages = [{"body": "again", "routing_key": "pipelined", "idempotency_key": "k-1"}]
                frames.append({"type": "publish", "seq": seq, "messages": messages, "mandatory": seq == 20})
            for frame in frames:  # all of them before reading any confirm
                await ws.send(orjson.dumps(frame))
            answers = [await recv(ws) for _ in frames]
        assert [a["seq"] for a in answers] == list(range(40))
        assert answers[10]["type"] == "error" and answers[10]["error"]["code"] == "invalid_body"
        assert answers[20]["type"] == "error" and answers[20]["error"]["code"] == "unroutable"
        assert answers[31]["results"][0]["duplicate"] is True
        assert answers[31]["results"][0]["id"] == answers[30]["results"][0]["id"]
        confirms = [a for a in answers if a["type"] == "confirm"]
        assert len(confirms) == 38 and all(a["durability"] == "interval" for a in confirms)
        offsets = [r["routed"][0]["offset"] for a in confirms for r in a["results"] if not r["duplicate"]]
        assert offsets == list(range(37 * 5))  # stored in frame order, densely
        with httpx.Client(base_url=srv.url) as api:
            page = ok(api.get("/api/v1/queues/pipelined/messages", params={"limit": 1000}))
        expected = [f"{seq}-{i}" for seq in range(40) if seq not in (10, 20, 31) for i in range(5)]
        assert [m["body"] for m in page["messages"]] == expected

    run(main())


def test_answers_that_are_ready_at_once_wait_behind_a_confirm_that_waits_for_its_fsync(tmp_path: Path) -> None:
    """fsync=always: a publish is confirmed after its fsync; a pong or an error frame, ready at once,
    must not overtake it (the reader answers by itself only when nothing is ahead)."""
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        fill(server, "durable", 0)

        async def main() -> None:
            async with open_ws(publish_url(server)) as ws:
                one = {"type": "publish", "messages": [{"body": "a", "routing_key": "durable"}]}
                bad = {"type": "publish", "seq": 2, "messages": [{"body": 7}]}
                for frame in ({**one, "seq": 0}, {"type": "ping"}, bad, {**one, "seq": 3}):
                    await send(ws, **frame)
                answers = [await recv(ws) for _ in range(4)]
                assert [(a["type"], a.get("seq")) for a in answers] == [
                    ("confirm", 0), ("pong", None), ("error", 2), ("confirm", 3)]
                assert all(a["durability"] == "fsync" for a in answers if a["type"] == "confirm")
                await send(ws, type="ping")  # nothing ahead now: answered by the reader itself
                assert await recv(ws) == {"type": "pong"}

        run(main())
    finally:
        server.stop()


def test_a_binary_publish_stream_takes_binary_batches_numbered_in_order(srv: ServerProcess) -> None:
    fill(srv, "binpub", 0)

    async def main() -> None:
        url = publish_url(srv) + "?format=binary&mandatory=true"
        async with open_ws(url) as ws:
            await ws.send(encode([OutgoingMessage(f"a{i}", routing_key="binpub") for i in range(3)]))
            await ws.send('{"type": "ping"}')  # text frames stay JSON
            await ws.send(encode([OutgoingMessage(b"\x00\xff", routing_key="binpub")]))
            await ws.send(encode([OutgoingMessage("lost", routing_key="nowhere")]))  # mandatory: refused
            await ws.send(b"\x05\x00")  # not a batch
            answers = [await asyncio.wait_for(ws.recv(), 5) for _ in range(5)]
        assert all(isinstance(a, str) for a in answers)  # every server frame is text
        first, pong, second, unroutable, bad = map(orjson.loads, answers)
        assert (first["type"], first["seq"], len(first["results"])) == ("confirm", 1, 3)
        assert pong == {"type": "pong"}
        assert (second["seq"], second["results"][0]["routed"][0]["offset"]) == (2, 3)
        assert (unroutable["seq"], unroutable["error"]["code"]) == (3, "unroutable")
        assert (bad["seq"], bad["type"], bad["error"]["code"]) == (4, "error", "invalid_body")
        with httpx.Client(base_url=srv.url) as api:
            page = ok(api.get("/api/v1/queues/binpub/messages"))
        assert [m.get("body") or m.get("body_base64") for m in page["messages"]] == ["a0", "a1", "a2", "AP8="]
        async with open_ws(publish_url(srv) + "?format=binary&mandatory=maybe") as ws:
            frame = await recv(ws)
            assert frame["error"]["code"] == "invalid_request" and "mandatory" in frame["error"]["message"]
            assert await closed_with(ws) == 4400

    run(main())


def test_publish_stream_bad_frames(srv: ServerProcess) -> None:
    async def main() -> None:
        async with open_ws(publish_url(srv)) as ws:
            await send(ws, type="publish", messages=[{"body": "x"}])
            assert (await recv(ws))["seq"] is None
            await send(ws, type="publish", seq=3, messages=[{"body": "x"}], extra=1)
            answer = await recv(ws)
            assert (answer["seq"], answer["error"]["code"]) == (3, "invalid_body")
            await send(ws, type="ping")
            assert (await recv(ws))["type"] == "pong"
            await send(ws, type="publish", seq=4, messages=[{"body": "x", "routing_key": "nowhere"}])
            assert (await recv(ws))["results"][0]["routed"] == []
            await ws.send("{oops")
            assert await closed_with(ws) == 1007

    run(main())


def test_publish_stream_refuses_header_limits_and_nul_like_http(srv: ServerProcess) -> None:
    fill(srv, "bounded", 0)

    async def main() -> None:
        async with open_ws(publish_url(srv)) as ws:
            frames = [
                [{"body": "x", "routing_key": "bounded", "headers": {f"h{i}": "v" for i in range(65)}}],
                [{"body": "x", "routing_key": "bounded\u0000"}],
                [{"body": "x", "routing_key": "bounded", "headers": {"k": "\u0000"}}],
                [{"body": "x", "routing_key": "bounded", "tag": "t\u0000"}],
                [{"body": "x", "routing_key": "bounded", "idempotency_key": "\u0000"}],
            ]
            fields = ["headers", "routing_key", "headers", "tag", "idempotency_key"]
            for seq, messages in enumerate(frames):
                await send(ws, type="publish", seq=seq, messages=messages)
                answer = await recv(ws)
                assert (answer["seq"], answer["type"], answer["error"]["code"]) == (seq, "error", "invalid_body")
                assert f"messages[0].{fields[seq]}" in answer["error"]["message"]
            await send(ws, type="publish", seq=9, messages=[{"body": "ok", "routing_key": "bounded"}])
            assert (await recv(ws))["type"] == "confirm"
        with httpx.Client(base_url=srv.url) as api:
            page = ok(api.get("/api/v1/queues/bounded/messages"))
        assert [m["body"] for m in page["messages"]] == ["ok"]

    run(main())
