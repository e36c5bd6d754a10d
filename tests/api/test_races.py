"""Concurrent admin requests against a real server: the answers are what a lone request would get,
in some order, never a 500 (two identical declares answered 500 from the unique constraint). Every
test runs with the metadata in SQLite and in PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import httpx
import pytest

from chunkmq.meta import MetaStore
from tests.api.client import ok
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def shared_server(
    tmp_path_factory: pytest.TempPathFactory, database_env: Callable[[], dict[str, str]]
) -> Iterator[ServerProcess]:
    """As tests/api/conftest.py's, on each metadata backend."""
    proc = ServerProcess(tmp_path_factory.mktemp("broker") / "data", CHUNKMQ_AUTH="off", **database_env()).start()
    yield proc
    proc.stop()


def queue_rows(server: ServerProcess, name: str) -> int:
    """How many rows the server's metadata database holds for queue `name`."""
    url = server.env.get("CHUNKMQ_DATABASE_URL") or f"sqlite:///{server.data_dir / 'meta.db'}"
    with MetaStore(url) as meta:
        return sum(q.name == name for q in meta.load().queues)


def at_once(server: ServerProcess, *calls: Callable[[httpx.Client], httpx.Response]) -> list[httpx.Response]:
    """Run the calls from separate threads and connections, released together by a barrier."""
    barrier = threading.Barrier(len(calls))
    clients = [httpx.Client(base_url=server.url, timeout=30) for _ in calls]
    for c in clients:
        c.get("/healthz")  # connect first, so the requests leave together

    def run(i: int) -> httpx.Response:
        barrier.wait()
        return calls[i](clients[i])

    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            return list(pool.map(run, range(len(calls))))
    finally:
        for c in clients:
            c.close()


def codes_of(responses: list[httpx.Response]) -> list[int]:
    for r in responses:
        assert r.status_code < 500, r.text
        if r.status_code >= 400:
            assert set(r.json()["error"]) == {"code", "message"}
    return [r.status_code for r in responses]


def _put(path: str, body: dict[str, str], client: httpx.Client) -> httpx.Response:
    return client.put(path, json=body)


def test_identical_declares_answer_201_then_200(shared_server: ServerProcess, name: str) -> None:
    for i in range(5):
        q = f"{name}-{i}"
        put = partial(_put, f"/api/v1/queues/{q}", {})
        assert sorted(codes_of(at_once(shared_server, put, put, put, put))) == [200, 200, 200, 201]
        assert queue_rows(shared_server, q) == 1
        ex = partial(_put, f"/api/v1/exchanges/{name}-x{i}", {"type": "fanout"})
        assert sorted(codes_of(at_once(shared_server, ex, ex))) == [200, 201]


def test_declare_against_delete(shared_server: ServerProcess, name: str) -> None:
    with httpx.Client(base_url=shared_server.url) as api:
        for i in range(5):
            q = f"{name}-{i}"
            ok(api.put(f"/api/v1/queues/{q}", json={}), 201)
            declare, delete = codes_of(at_once(
                shared_server,
                lambda c, q=q: c.put(f"/api/v1/queues/{q}", json={}),
                lambda c, q=q: c.delete(f"/api/v1/queues/{q}"),
            ))
            assert declare in (200, 201) and delete == 204
            after = api.get(f"/api/v1/queues/{q}").status_code
            assert after == (200 if declare == 201 else 404)  # a declare after the delete made it anew
            twice = codes_of(at_once(shared_server, *[lambda c, q=q: c.delete(f"/api/v1/queues/{q}")] * 2))
            assert sorted(twice) in ([204, 404], [404, 404])


def test_bind_against_exchange_delete(shared_server: ServerProcess, name: str) -> None:
    with httpx.Client(base_url=shared_server.url) as api:
        ok(api.put(f"/api/v1/queues/{name}", json={}), 201)
        for i in range(5):
            x = f"{name}-x{i}"
            ok(api.put(f"/api/v1/exchanges/{x}", json={"type": "direct"}), 201)
            bind, delete = at_once(
                shared_server,
                lambda c, x=x: c.post("/api/v1/bindings", json={"exchange": x, "queue": name, "routing_key": "k"}),
                lambda c, x=x: c.delete(f"/api/v1/exchanges/{x}"),
            )
            codes_of([bind, delete])
            assert delete.status_code == 204
            assert bind.status_code == 201 or bind.json()["error"]["code"] == "exchange_not_found"
            assert ok(api.get("/api/v1/bindings", params={"exchange": x})) == []
            assert api.get(f"/api/v1/exchanges/{x}").status_code == 404


def test_pull_against_queue_delete(shared_server: ServerProcess, name: str) -> None:
    with httpx.Client(base_url=shared_server.url) as api:
        for i in range(5):
            q = f"{name}-{i}"
            ok(api.put(f"/api/v1/queues/{q}", json={}), 201)
            pull, delete = at_once(
                shared_server,
                lambda c, q=q: c.post(f"/api/v1/queues/{q}/groups/g/pull", json={"wait_ms": 300}),
                lambda c, q=q: c.delete(f"/api/v1/queues/{q}", params={"force": "true"}),
            )
            codes_of([pull, delete])
            assert delete.status_code == 204
            assert (pull.status_code == 200 and pull.json() == {"messages": []}) or (
                pull.json()["error"]["code"] in ("queue_not_found", "group_not_found")), pull.text
        # a pull that is waiting when its queue goes: answered at once with 404, not after wait_ms
        ok(api.put(f"/api/v1/queues/{name}", json={}), 201)
        ok(api.post(f"/api/v1/queues/{name}/groups/g/pull", json={}))
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(lambda: httpx.post(
                f"{shared_server.url}/api/v1/queues/{name}/groups/g/pull", json={"wait_ms": 20_000}, timeout=30))
            threading.Event().wait(0.3)
            ok(api.delete(f"/api/v1/queues/{name}"), 204)
            answer = waiting.result(timeout=5)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "queue_not_found", answer.text
