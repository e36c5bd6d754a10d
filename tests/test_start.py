"""app/start.py on a real server: a restart answers from its first stage, and every request sent while
the full app is being built gets the answer the full app gives, auth included: never a 404 or 5xx."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from chunkmq import start
from chunkmq.config import Settings
from chunkmq.meta import MetaStore, upgrade
from chunkmq.meta.plain import PlainMeta
from tests.server import ServerProcess

Q = "/api/v1/queues/q"
Answer = tuple[str, int, int, str, float]  # name, status, expected status, body, seconds after sending


def test_requests_during_the_stage_change_get_the_full_apps_answers(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_LOG_LEVEL="info").start()  # the first start: the full app
    admin = {"authorization": f"Bearer {(tmp_path / 'data' / 'admin-token').read_text().strip()}"}
    try:
        with httpx.Client(base_url=server.url, headers=admin) as api:
            assert api.put(Q, json={}).status_code == 201
            assert api.put(f"{Q}/groups/g", json={"start": "earliest"}).status_code == 201
            fifty = {"messages": [{"body": f"m{i}"} for i in range(50)]}
            assert api.post(f"{Q}/publish", json=fifty).status_code == 200
        server.stop()
        with MetaStore(f"sqlite:///{(tmp_path / 'data' / 'meta.db').resolve()}") as meta:
            _, reader = meta.create_token("reader", read="^q$")
        server.start()  # returns at the first /healthz answer: the first stage's
        checks = _requests(server.url, admin, {"authorization": f"Bearer {reader}"})
        with ThreadPoolExecutor(len(checks)) as pool:
            answered = list(pool.map(lambda check: check(), checks))
    finally:
        server.stop()
    wrong = [(name, status, body) for name, status, expected, body, _ in answered if status != expected]
    assert not wrong, wrong
    done_at = {name: at for name, *_, at in answered}
    # The hot routes were answered before the full app was up (its routes waited for it).
    assert max(done_at["publish"], done_at["pull"], done_at["no token"]) < done_at["queue"], done_at
    assert "the full app is up" in server.log()


def _requests(url: str, admin: dict[str, str], reader: dict[str, str]) -> list[Callable[[], Answer]]:
    """Requests to send at once, each on its own connection."""
    started = time.monotonic()

    def call(name: str, expected: int, method: str, path: str, headers: dict[str, str],
             body: object = None) -> Callable[[], Answer]:
        def go() -> Answer:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                response = client.request(method, path, json=body)
            return name, response.status_code, expected, response.text[:300], time.monotonic() - started
        return go

    def stream() -> Answer:  # a consume stream: answers a ping once the full app is up
        token = admin["authorization"].removeprefix("Bearer ")
        with connect(f"ws{url.removeprefix('http')}{Q}/groups/g/stream?token={token}", compression=None,
                     open_timeout=60) as ws:
            ws.send(orjson.dumps({"type": "ping"}))
            frame = orjson.loads(ws.recv(timeout=60))
        return "stream", 200 if frame.get("type") == "pong" else 500, 200, str(frame), time.monotonic() - started

    pull = {"max_messages": 10, "wait_ms": 0, "consumer": "c", "ack": {"up_to": 0}}
    return [
        stream,
        call("readyz", 200, "GET", "/readyz", {}),
        call("publish", 200, "POST", f"{Q}/publish", admin, {"messages": [{"body": "during"}]}),
        call("pull", 200, "POST", f"{Q}/groups/g/pull", admin, pull),
        call("no token", 401, "POST", f"{Q}/publish", {}, {"messages": [{"body": "x"}]}),
        call("read-only token publishes", 403, "POST", f"{Q}/publish", reader, {"messages": [{"body": "x"}]}),
        call("read-only token pulls", 200, "POST", f"{Q}/groups/r/pull", reader, {"max_messages": 1}),  # a new group
        call("publish to a missing queue", 404, "POST", "/api/v1/queues/nope/publish", admin,
             {"messages": [{"body": "x"}]}),
        call("queue", 200, "GET", Q, admin),
        call("queues without a token", 401, "GET", "/api/v1/queues", {}),
        call("console", 200, "GET", "/login", {}),
    ]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def lifespan_of(app: start.Staged) -> AsyncIterator[None]:
    """`app` started as uvicorn starts it (the ASGI lifespan protocol), and shut down after."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))  # type: ignore[arg-type]
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    yield
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
    await lifespan


@pytest.mark.anyio
async def test_a_second_stage_that_fails_leaves_the_first_stages_answers(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the hot routes and readiness go on answering, the rest is 503 `unavailable` (not a
    hang, not a 404), the failure is logged, and the broker is closed at shutdown."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    with MetaStore(url) as meta:
        meta.create_user("admin", "a-long-enough-password")
    settings = Settings(data_dir=tmp_path, auth="off")

    def broken(_: Settings) -> None:
        raise RuntimeError("no full app today")

    monkeypatch.setattr(start, "_build", broken)
    plain = PlainMeta.open(settings.meta_url, tokens=False)
    assert plain is not None
    app = start.Staged(settings, plain)
    async with lifespan_of(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as api:
            assert (await api.get("/readyz")).json() == {"status": "ready"}
            missing = await api.post("/api/v1/queues/none/publish", json={"messages": [{"body": "x"}]})
            assert missing.json()["error"]["code"] == "queue_not_found"
            waiting = await api.get("/api/v1/queues")  # waits for the second stage, which fails
            assert waiting.status_code == 503 and waiting.json()["error"]["code"] == "unavailable"
        assert app.full is None
    assert app.state.broker.store.closed


@pytest.mark.anyio
@pytest.mark.parametrize("first", ["readyz", "publish", "queues", "no request"])
async def test_the_second_stage_begins_after_the_first_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              first: str) -> None:
    """Not before: its imports would take the GIL from the server's start and first answer. A request
    for the full app begins it at once, and without any request it begins SECOND_STAGE_AFTER_SECONDS
    after the first stage."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    with MetaStore(url) as meta:
        meta.create_user("admin", "a-long-enough-password")
    settings = Settings(data_dir=tmp_path, auth="off")
    begun: list[str] = []

    def build(_: Settings) -> None:
        begun.append(first)
        raise RuntimeError("the build is not what this test looks at")

    monkeypatch.setattr(start, "_build", build)
    monkeypatch.setattr(start, "SECOND_STAGE_AFTER_SECONDS", 0.3 if first == "no request" else 60)
    plain = PlainMeta.open(settings.meta_url, tokens=False)
    assert plain is not None
    app = start.Staged(settings, plain)
    async with lifespan_of(app):
        await asyncio.sleep(0.1)
        assert begun == [] and not app.built.is_set()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as api:
            if first == "readyz":
                assert (await api.get("/readyz")).status_code == 200
            elif first == "publish":
                missing = await api.post("/api/v1/queues/none/publish", json={"messages": [{"body": "x"}]})
                assert missing.status_code == 404
            elif first == "queues":
                assert (await api.get("/api/v1/queues")).status_code == 503  # waited for the (failed) second stage
        await asyncio.wait_for(app.built.wait(), 10)
        assert begun == [first]
