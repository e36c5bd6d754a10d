"""Single active consumer against a real server with real WebSocket consumers: one receives at a
time, in order; when it closes, is killed with kill -9, or stops answering pings, the next takes
over with the unacked messages first, and the takeover is timed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.client import ok
from tests.api.test_streams import consume_url, fill, group_info, messages_until_quiet, open_ws, recv, send
from tests.server import ServerProcess

PING_INTERVAL, PING_TIMEOUT = 0.5, 1.0

# A consumer in a process of its own: takes `n` messages without acking them, says so, then
# stays (until it is killed or stopped).
VICTIM = """
import asyncio, sys, orjson
from websockets.asyncio.client import connect

async def main() -> None:
    async with connect(sys.argv[1], compression=None) as ws:
        await ws.send(orjson.dumps({"type": "credit", "n": int(sys.argv[2])}))
        got = 0
        while got < int(sys.argv[2]):
            got += len(orjson.loads(await ws.recv())["messages"])
        print("took", got, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("single")) / "data"
    proc = ServerProcess(data, CHUNKMQ_AUTH="off", CHUNKMQ_WS_PING_INTERVAL=str(PING_INTERVAL),
                         CHUNKMQ_WS_PING_TIMEOUT=str(PING_TIMEOUT)).start()
    yield proc
    proc.stop()


def _declare(server: ServerProcess, q: str, n: int) -> None:
    fill(server, q, n)
    ok(httpx.put(f"{server.url}/api/v1/queues/{q}/groups/g", json={"single_active_consumer": True}), 201)


def _publish(server: ServerProcess, q: str, bodies: list[str]) -> None:
    ok(httpx.post(f"{server.url}/api/v1/exchanges/amq.default/publish",
                  json={"messages": [{"body": b, "routing_key": q} for b in bodies]}))


def run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def test_one_stream_receives_and_the_next_takes_over_with_the_unacked_first(srv: ServerProcess) -> None:
    _declare(srv, "sac1", 10)

    async def main() -> None:
        async with open_ws(consume_url(srv, "sac1", consumer="first")) as first, \
                open_ws(consume_url(srv, "sac1", consumer="second")) as second:
            await send(first, type="credit", n=100)
            got = await messages_until_quiet(first)
            await send(second, type="credit", n=100)
            assert [m["offset"] for m in got] == list(range(10))
            _publish(srv, "sac1", ["10", "11"])
            assert [m["offset"] for m in await messages_until_quiet(first)] == [10, 11]
            assert await messages_until_quiet(second) == []  # connected, waiting its turn
            info = group_info(srv, "sac1")
            assert (info["single_active_consumer"], info["active_consumer"]) == (True, "first")
            await send(first, type="ack", offsets=[0, 1, 2])
            await send(first, type="ping")
            assert (await recv(first))["type"] == "pong"
            await first.close()
            taken = await messages_until_quiet(second)
            # 3..11 were unacked: delivered again, first and in order
            assert [(m["offset"], m["delivery_count"]) for m in taken] == [(o, 2) for o in range(3, 12)]
            _publish(srv, "sac1", ["12"])
            assert [m["offset"] for m in await messages_until_quiet(second)] == [12]
            assert group_info(srv, "sac1")["active_consumer"] == "second"

    run(main())


@pytest.mark.parametrize("how", ["kill -9", "no pong"])
def test_the_next_takes_over_within_the_ping_timeout_when_the_active_process_dies(
        srv: ServerProcess, how: str) -> None:
    q = "sac-kill" if how == "kill -9" else "sac-stop"
    _declare(srv, q, 5)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, consume_url(srv, q, consumer="victim"), "5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "took 5"
        assert group_info(srv, q)["active_consumer"] == "victim"

        async def main() -> float:
            async with open_ws(consume_url(srv, q, consumer="standby")) as standby:
                await send(standby, type="credit", n=100)
                assert await messages_until_quiet(standby) == []
                _publish(srv, q, ["5"])
                assert await messages_until_quiet(standby) == []  # the victim holds the group
                started = time.monotonic()
                os.kill(victim.pid, signal.SIGKILL if how == "kill -9" else signal.SIGSTOP)
                frame = await recv(standby, 10)
                took = time.monotonic() - started
                got = frame["messages"] + await messages_until_quiet(standby)
                assert [(m["offset"], m["delivery_count"]) for m in got] == [(o, 2) for o in range(5)] + [(5, 1)]
                assert group_info(srv, q)["active_consumer"] == "standby"
                return took

        took = asyncio.run(asyncio.wait_for(main(), 60))
        print(f"takeover after {how}: {took * 1000:.0f} ms")
        if how == "kill -9":
            assert took < PING_TIMEOUT  # the kernel closes the socket: at once
        else:
            assert took < PING_INTERVAL + PING_TIMEOUT + 0.5  # an unanswered ping, then its timeout
    finally:
        victim.kill()
        victim.wait()
