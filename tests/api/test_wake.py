"""app/api/wake.py: a long poll woken by a publish, on a real server, is answered inside the publish,
ahead of the publish's own answer, and at its wait_ms when nothing comes; in process, `run` resumes a
coroutine parked on a Wake inside the fire and hands any other wait to `spawn`."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from chunkmq.api import wake as api_wake
from chunkmq.broker.wake import Wake
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(Path(tmp_path_factory.mktemp("wake")) / "data", CHUNKMQ_AUTH="off").start()
    with httpx.Client(base_url=proc.url) as api:
        api.put("/api/v1/queues/q", json={}).raise_for_status()
        api.put("/api/v1/queues/q/groups/g", json={}).raise_for_status()
        api.put("/api/v1/queues/idle", json={}).raise_for_status()
    yield proc
    proc.stop()


def post(sock: socket.socket, path: str, body: dict[str, object]) -> None:
    raw = orjson.dumps(body)
    sock.sendall(b"POST %b HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%b" % (path.encode(), len(raw), raw))


def answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), data
    return body


def test_a_publish_answers_the_waiting_long_poll_before_itself(srv: ServerProcess) -> None:
    with (socket.create_connection(("127.0.0.1", srv.port)) as puller,
          socket.create_connection(("127.0.0.1", srv.port)) as publisher):
        for i in range(20):
            post(puller, "/api/v1/queues/q/groups/g/pull", {"wait_ms": 5000, "ack": {"up_to": i}} if i else
                 {"wait_ms": 5000})
            time.sleep(0.01)  # the pull is waiting
            post(publisher, "/api/v1/queues/q/publish", {"messages": [{"body": str(i)}]})
            readable: list[socket.socket] = []
            while publisher not in readable:
                readable = select.select([publisher, puller], [], [], 5)[0]
                assert readable, "no answer within 5 s"
            assert puller in readable, f"publish {i} answered before the pull it woke"
            answer(publisher)
            assert [m["body"] for m in orjson.loads(answer(puller))["messages"]] == [str(i)]


def test_a_long_poll_nothing_wakes_ends_empty_at_its_wait(srv: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", srv.port)) as puller:
        started = time.monotonic()
        post(puller, "/api/v1/queues/idle/groups/g/pull", {"wait_ms": 300})
        assert orjson.loads(answer(puller)) == {"messages": []}
        assert 0.3 <= time.monotonic() - started < 2


def test_in_fsync_always_a_woken_pull_that_carries_an_ack_waits_for_its_fsync(tmp_path: Path) -> None:
    """The ack's fsync is a wait of another kind: the pull goes on in a task, and still answers."""
    proc = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_FSYNC="always").start()
    try:
        with httpx.Client(base_url=proc.url) as api:
            api.put("/api/v1/queues/q", json={}).raise_for_status()
            api.post("/api/v1/queues/q/publish", json={"messages": [{"body": "first"}]}).raise_for_status()
            pulled = api.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 1}).json()["messages"]
            assert [m["body"] for m in pulled] == ["first"]
        with (socket.create_connection(("127.0.0.1", proc.port)) as puller,
              socket.create_connection(("127.0.0.1", proc.port)) as publisher):
            post(puller, "/api/v1/queues/q/groups/g/pull", {"wait_ms": 5000, "ack": {"up_to": 1}})
            time.sleep(0.05)
            post(publisher, "/api/v1/queues/q/publish", {"messages": [{"body": "second"}]})
            answer(publisher)
            assert [m["body"] for m in orjson.loads(answer(puller))["messages"]] == ["second"]
        with httpx.Client(base_url=proc.url) as api:
            assert api.get("/api/v1/queues/q/groups/g").json()["ack_floor"] == 1
    finally:
        proc.stop()


# run (app/api/wake.py) in process: a coroutine parked on a Wake goes on inside the fire; at any
# other wait it is handed to `spawn`


def test_run_resumes_inside_the_fire_and_hands_other_waits_to_spawn() -> None:
    async def main() -> None:
        first, other = Wake(), asyncio.get_running_loop().create_future()
        order: list[str] = []
        spawned: list[asyncio.Future[None]] = []

        async def pull() -> None:
            order.append(f"got {await first}")
            await other  # not a Wake: the rest goes on in a task
            order.append("done")

        def spawn(coroutine: Coroutine[Any, Any, None]) -> object:
            spawned.append(asyncio.ensure_future(coroutine))
            return spawned[-1]

        driven = api_wake.run(pull(), spawn)
        assert driven is not None and driven.waiting is first and order == [] and spawned == []
        first.fire("m1")
        assert order == ["got m1"] and len(spawned) == 1  # resumed in the fire, then spawned at `other`
        other.set_result(None)
        await spawned[0]
        assert order == ["got m1", "done"]

    asyncio.run(main())


def test_to_task_moves_a_parked_run_into_a_task() -> None:
    async def main() -> None:
        parked = Wake()
        tasks: list[asyncio.Future[None]] = []
        got: list[str] = []

        async def pull() -> None:
            got.append(await parked)

        def spawn(coroutine: Coroutine[Any, Any, None]) -> object:
            tasks.append(asyncio.ensure_future(coroutine))
            return tasks[-1]

        driven = api_wake.run(pull(), spawn)
        assert driven is not None
        driven.to_task()
        assert driven.waiting is None and parked.resume is None and len(tasks) == 1
        parked.fire("late")  # the task, not the fire, goes on with it
        await asyncio.wait_for(tasks[0], 5)
        assert got == ["late"]

    asyncio.run(main())


def test_a_coroutine_that_finishes_at_once_leaves_nothing_to_drive() -> None:
    done: list[str] = []

    async def publish() -> None:
        done.append("answered")

    assert api_wake.run(publish(), lambda coroutine: None) is None and done == ["answered"]
