"""Server-sent events (app/api/events.py): in process through the whole app's ASGI stack, read as a
client reads a stream (httpx's ASGITransport waits for the end of a response; this one never ends),
and against a real `chunkmq serve` with `curl -N`."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from chunkmq.api.events import _event
from tests.api.client import ok
from tests.api.conftest import local_client
from tests.server import ServerProcess

pytestmark = pytest.mark.anyio

PAGE = "http://127.0.0.1:5173"


@pytest.fixture
async def app_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with local_client(tmp_path, sse_heartbeat_seconds=0.2, cors_origins=PAGE) as client:
        yield client


class Stream:
    """One GET of the events route through the app's ASGI stack: its head, and its body as it comes."""

    def __init__(self, app: Any, path: str, headers: dict[str, str] | None = None) -> None:
        target, _, query = path.partition("?")
        self.scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                      "method": "GET", "scheme": "http", "path": target, "raw_path": target.encode(),
                      "query_string": query.encode(), "root_path": "", "server": ("local", 80),
                      "client": ("127.0.0.1", 5000),
                      "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
        self.app = app
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.grew = asyncio.Event()
        self.gone = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Stream:
        self.task = asyncio.create_task(self.app(self.scope, self._receive, self._send))
        return self

    async def __aexit__(self, *_: object) -> None:
        self.gone.set()  # the client goes: http.disconnect
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    async def _receive(self) -> dict[str, Any]:
        if not getattr(self, "_requested", False):
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            self.body += message.get("body", b"")
            if not message.get("more_body", False):
                self.gone.set()
        self.grew.set()

    async def wait_for(self, done: Any, timeout: float = 5.0) -> None:
        """Until done(self) holds."""
        async with asyncio.timeout(timeout):
            while not done(self):
                self.grew.clear()
                await self.grew.wait()

    def events(self) -> list[dict[str, Any]]:
        """The events so far (comments left out): each as {"id", "data"} or {"event", "data"}."""
        out = []
        for block in self.body.decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
            if fields:
                if "data" in fields:
                    fields["data"] = orjson.loads(fields["data"])
                out.append(fields)
        return out

    def messages(self) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events() if "id" in e]


def _count(n: int) -> Any:
    return lambda s: len(s.messages()) >= n


async def _publish(api: httpx.AsyncClient, queue: str, *bodies: str) -> None:
    ok(await api.post(f"/queues/{queue}/publish", json={"messages": [{"body": b} for b in bodies]}))


def _path(queue: str, **query: str) -> str:
    return f"/api/v1/queues/{queue}/groups/g/events?" + "&".join(f"{k}={v}" for k, v in query.items())


async def test_each_message_is_an_event_with_its_offset(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/q", json={}), 201)
    await _publish(app_api, "q", "a", "b")
    auth = {"authorization": f"Bearer {app_api.token}"}  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("q", consumer="c1"), auth) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(_count(2))
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["x-accel-buffering"] == "no"
        assert stream.headers["cache-control"] == "no-cache"
        await _publish(app_api, "q", "c")  # woken by the publish, not a poll
        await stream.wait_for(_count(3), timeout=1)
        events = [e for e in stream.events() if "id" in e]
        assert [e["id"] for e in events] == ["0", "1", "2"]
        assert [m["body"] for m in stream.messages()] == ["a", "b", "c"]
        assert stream.body.startswith(b": connected\n\n")
    # the message as a pull returns it (a second group sees the same first delivery)
    pulled = ok(await app_api.post("/queues/q/groups/other/pull", json={"max_messages": 1}))["messages"][0]
    assert set(pulled) == set(stream.messages()[0])
    assert {k: v for k, v in pulled.items()} == stream.messages()[0]
    groups = {g["name"]: g for g in ok(await app_api.get("/queues/q/groups"))}
    assert groups["g"]["in_flight"] == 3  # unacked: in flight for c1 until acked or timed out


async def test_prefetch_bounds_what_is_in_flight_and_acks_give_it_back(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/p", json={}), 201)
    await _publish(app_api, "p", *"abcde")
    token = app_api.token  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("p", consumer="c1", prefetch="2", token=token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(_count(2))
        await asyncio.sleep(0.3)
        assert len(stream.messages()) == 2
        ok(await app_api.post("/queues/p/groups/g/ack", json={"offsets": [0]}))
        await stream.wait_for(_count(3), timeout=2)
        ok(await app_api.post("/queues/p/groups/g/ack", json={"up_to": 3}))
        await stream.wait_for(_count(5), timeout=2)
        assert [m["offset"] for m in stream.messages()] == [0, 1, 2, 3, 4]


async def test_a_reconnect_with_last_event_id_gets_its_in_flight_messages_at_once(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/r", json={}), 201)
    await _publish(app_api, "r", "a", "b")
    token = app_api.token  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("r", consumer="c1", token=token)) as first:  # type: ignore[attr-defined]
        await first.wait_for(_count(2))
    ok(await app_api.post("/queues/r/groups/g/ack", json={"offsets": [0]}))
    async with Stream(app_api.app, _path("r", consumer="c1", token=token)) as plain:  # type: ignore[attr-defined]
        await asyncio.sleep(0.3)
        assert plain.messages() == []  # still in flight for c1 until its ack timeout
    async with Stream(app_api.app, _path("r", consumer="c1", token=token),  # type: ignore[attr-defined]
                      {"last-event-id": "1"}) as again:
        await again.wait_for(_count(1))
        assert [(m["offset"], m["delivery_count"]) for m in again.messages()] == [(1, 2)]


async def test_head_sends_the_head_and_delivers_nothing(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/h", json={}), 201)
    await _publish(app_api, "h", "a")
    token = app_api.token  # type: ignore[attr-defined]
    head = await app_api.head("http://local" + _path("h", token=token))
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    groups = {g["name"]: g for g in ok(await app_api.get("/queues/h/groups"))}
    assert groups["g"]["in_flight"] == 0


async def test_a_comment_keeps_an_idle_stream_open(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/idle", json={}), 201)
    token = app_api.token  # type: ignore[attr-defined]
    started = time.monotonic()
    async with Stream(app_api.app, _path("idle", token=token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(lambda s: s.body.count(b": keep-alive\n\n") >= 2)
    assert time.monotonic() - started >= 0.35  # two heartbeats of 0.2 s
    assert stream.events() == []


async def test_refusals_before_the_stream_opens(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/e", json={}), 201)
    token = app_api.token  # type: ignore[attr-defined]
    cases = [
        (_path("e"), {"authorization": "Bearer nope"}, 401, "unauthorized"),
        (_path("e", token="nope"), {}, 401, "unauthorized"),
        (_path("e"), {}, 401, "unauthorized"),
        (_path("e", token=token, prefetch="0"), {}, 400, "invalid_request"),
        (_path("e", token=token, prefetch="x"), {}, 400, "invalid_request"),
        (_path("e", token=token, consumer="a%20b"), {}, 400, "invalid_name"),
        (_path("missing", token=token), {}, 404, "queue_not_found"),
    ]
    for path, headers, status, code in cases:
        async with Stream(app_api.app, path, headers) as stream:  # type: ignore[attr-defined]
            await stream.wait_for(lambda s: s.gone.is_set())
        assert (stream.status, orjson.loads(stream.body)["error"]["code"]) == (status, code), path
        assert stream.headers.get("access-control-allow-origin") is None  # no Origin sent
    ok(await app_api.put("/queues/hidden", json={}), 201)
    ok(await app_api.patch("/queues/hidden", json={"consumer_visible": False}))
    async with Stream(app_api.app, _path("hidden", token=token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(lambda s: s.gone.is_set())
    assert (stream.status, orjson.loads(stream.body)["error"]["code"]) == (409, "precondition_failed")


async def test_a_deleted_group_ends_the_stream_with_an_error_event(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/d", json={}), 201)
    token = app_api.token  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("d", token=token), {"origin": PAGE}) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(lambda s: b"connected" in s.body)
        assert stream.headers["access-control-allow-origin"] == PAGE
        ok(await app_api.delete("/queues/d/groups/g"), 204)
        await stream.wait_for(lambda s: s.gone.is_set())
    assert stream.events() == [{"event": "error", "data": {"error": {
        "code": "group_not_found", "message": "group 'g' on queue 'd' was deleted"}}}]


async def test_a_deleted_queue_ends_the_stream_with_an_error_event(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/gone", json={}), 201)
    token = app_api.token  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("gone", token=token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(lambda s: b"connected" in s.body)
        ok(await app_api.delete("/queues/gone"), 204)
        await stream.wait_for(lambda s: s.gone.is_set())
    assert [e["data"]["error"]["code"] for e in stream.events()] == ["queue_not_found"]


async def test_the_end_hook_ends_the_stream_cleanly(app_api: httpx.AsyncClient) -> None:
    from chunkmq.api.events import STREAM_END

    ok(await app_api.put("/queues/end", json={}), 201)
    token = app_api.token  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("end", token=token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(lambda s: b"connected" in s.body)
        stream.scope[STREAM_END]()  # as chunkmq serve's protocol does at shutdown (in the server's scope)
        await stream.wait_for(lambda s: s.gone.is_set(), timeout=1)
    assert stream.body == b": connected\n\n"


async def test_deliveries_are_counted_as_the_stream_counts_them(app_api: httpx.AsyncClient) -> None:
    def delivered(text: str) -> float:
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("chunkmq_messages_delivered_total"))

    ok(await app_api.put("/queues/m", json={}), 201)
    before = delivered((await app_api.get("http://local/metrics")).text)
    await _publish(app_api, "m", "a", "b", "c")
    async with Stream(app_api.app, _path("m", token=app_api.token)) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(_count(3))
    assert delivered((await app_api.get("http://local/metrics")).text) - before == 3


def test_an_event_is_one_line_of_data() -> None:
    assert _event(b'{"offset":7,"body":"a\\nb"}') == (7, b'id: 7\ndata: {"offset":7,"body":"a\\nb"}\n\n')
    offset, event = _event(b'{"offset":8,\n"body":"x"}')  # a raw line break would split the data field
    assert offset == 8 and event == b'id: 8\ndata: {"offset":8,"body":"x"}\n\n'


# --- a real server, with curl -N -------------------------------------------------------------------

@pytest.fixture(scope="module")
def sse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("sse")) / "data"
    proc = ServerProcess(data, CHUNKMQ_SSE_HEARTBEAT_SECONDS="0.3", CHUNKMQ_CORS_ORIGINS=PAGE,
                         CHUNKMQ_LOG_LEVEL="info").start()
    yield proc
    proc.stop()


def _curl_n(url: str, seconds: float, *headers: str) -> str:
    """What `curl -N` printed (head included) before it was stopped after `seconds`."""
    args = [a for h in headers for a in ("-H", h)]
    out = subprocess.run(["curl", "-sS", "-N", "-i", "--max-time", str(seconds), *args, url], capture_output=True)
    assert out.returncode == 28, out.stderr  # 28: stopped at --max-time, the stream still open
    return out.stdout.decode()


def test_real_server_with_curl(sse_server: ServerProcess) -> None:
    token = (sse_server.data_dir / "admin-token").read_text().strip()
    with httpx.Client(base_url=f"{sse_server.url}/api/v1", headers={"authorization": f"Bearer {token}"}) as api:
        ok(api.put("/queues/orders", json={}), 201)
        ok(api.post("/queues/orders/publish", json={"messages": [{"body": "one"}, {"body": "two"}]}))
        url = f"{sse_server.url}/api/v1/queues/orders/groups/g/events?token={token}&consumer=web-1&prefetch=1"
        out = _curl_n(url, 1.5, f"origin: {PAGE}")
        head, _, body = out.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 200") and "text/event-stream" in head
        assert "x-accel-buffering: no" in head and f"access-control-allow-origin: {PAGE}" in head
        assert body.count("id: ") == 1 and "id: 0\ndata: " in body  # prefetch 1, nothing acked
        assert body.count(": keep-alive") >= 2
        ok(api.post("/queues/orders/groups/g/ack", json={"offsets": [0]}))
        again = _curl_n(url, 2.5, "Last-Event-ID: 0")  # room for a loaded machine
        assert "id: 1\ndata: " in again and '"body":"two"' in again
        # 1, or 2 when the first stream was still open on the server at the ack (it notices a gone
        # client at its next write): it then delivered "two" there, and the reconnect redelivers it.
        assert re.search(r'"delivery_count":[12]\b', again), again
        requests = [line for line in sse_server.log().splitlines() if "/events?" in line]
        assert requests and all(token not in line and "token=[redacted]" in line for line in requests)


def test_a_shutdown_ends_open_streams_at_once(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_CHUNK_SIZE="1048576").start()
    try:
        token = (server.data_dir / "admin-token").read_text().strip()
        url = f"{server.url}/api/v1/queues/bye/groups/g/events?token={token}"
        assert httpx.put(f"{server.url}/api/v1/queues/bye", json={},
                         headers={"authorization": f"Bearer {token}"}).status_code == 201
        streams = [subprocess.Popen(["curl", "-sS", "-N", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for _ in range(2)]
        for stream in streams:
            assert stream.stdout is not None and stream.stdout.readline() == b": connected\n"
        started = time.monotonic()
        server.stop()  # SIGTERM (uvicorn raises it again once shut down)
        took = time.monotonic() - started
        for stream in streams:  # each stream was ended by the server: curl read its end, no error
            _, err = stream.communicate(timeout=10)
            assert stream.returncode == 0, err
        assert took < 3, f"the shutdown took {took:.1f} s"  # not the 5 s graceful-shutdown timeout
        assert "Traceback" not in server.log() and "timeout graceful shutdown" not in server.log()
    finally:
        server.kill()


async def test_a_paused_group_sends_no_events_until_resumed(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/pq", json={}), 201)
    ok(await app_api.put("/queues/pq/groups/g", json={}), 201)
    ok(await app_api.post("/queues/pq/groups/g/pause"))
    await _publish(app_api, "pq", "a", "b")
    auth = {"authorization": f"Bearer {app_api.token}"}  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("pq", consumer="s1"), auth) as stream:  # type: ignore[attr-defined]
        await asyncio.sleep(0.5)  # heartbeats (0.2 s) come, messages do not
        assert stream.status == 200 and stream.messages() == [] and b":" in stream.body
        ok(await app_api.post("/queues/pq/groups/g/resume"))
        await stream.wait_for(_count(2))
        assert [m["body"] for m in stream.messages()] == ["a", "b"]


async def test_one_event_stream_at_a_time_receives_a_single_active_consumer_group(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/sq", json={}), 201)
    ok(await app_api.put("/queues/sq/groups/g", json={"single_active_consumer": True}), 201)
    await _publish(app_api, "sq", "a", "b")
    auth = {"authorization": f"Bearer {app_api.token}"}  # type: ignore[attr-defined]
    app = app_api.app  # type: ignore[attr-defined]
    async with Stream(app, _path("sq", consumer="s2"), auth) as second:
        await second.wait_for(_count(2))  # s2 attached first: it is the active one
        async with Stream(app, _path("sq", consumer="s1"), auth) as first:
            await _publish(app_api, "sq", "c")
            await second.wait_for(_count(3))
            assert first.status == 200 and first.messages() == []
            assert ok(await app_api.get("/queues/sq/groups/g"))["active_consumer"] == "s2"
            second.gone.set()  # s2 goes without acking: s1 takes over with all three
            await first.wait_for(_count(3))
            assert [(m["offset"], m["delivery_count"]) for m in first.messages()] == [(0, 2), (1, 2), (2, 2)]


async def test_expired_messages_are_not_sent_as_events(app_api: httpx.AsyncClient) -> None:
    ok(await app_api.put("/queues/ttl", json={}), 201)
    ok(await app_api.post("/queues/ttl/publish", json={"messages": [{"body": "gone", "ttl_ms": 1}, {"body": "kept"}]}))
    await asyncio.sleep(0.01)
    auth = {"authorization": f"Bearer {app_api.token}"}  # type: ignore[attr-defined]
    async with Stream(app_api.app, _path("ttl", consumer="c1"), auth) as stream:  # type: ignore[attr-defined]
        await stream.wait_for(_count(1))
        await _publish(app_api, "ttl", "after")
        await stream.wait_for(_count(2), timeout=1)
        assert [m["body"] for m in stream.messages()] == ["kept", "after"]
    assert ok(await app_api.get("/queues/ttl/groups/g"))["expired"] == 1
