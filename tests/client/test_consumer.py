"""app/client/consumer.py against one real server (module-scoped, WebSocket streams need a socket):
manual acks and nacks, waiting with a timeout, closing, and a refused stream."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import pytest

from chunkmq.client import AsyncClient, Client, NotFound
from chunkmq.client.consumer import AsyncConsumer, Consumer, default_consumer_id
from tests.server import ServerProcess


def _settled(read: Callable[[], tuple[int, ...]], expected: tuple[int, ...]) -> tuple[int, ...]:
    """What `read` gives once it equals `expected` (or after 10 s): the server handles a stream's last
    frames on its own time after the socket closed."""
    deadline = time.monotonic() + 10
    while (got := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _position(mq: Client, queue: str) -> tuple[int, ...]:
    group = mq.group(queue, "g")
    return group.ack_floor, group.lag, group.in_flight


def _fill(mq: Client, queue: str, n: int) -> None:
    mq.declare_queue(queue)
    mq.declare_group(queue, "g")
    mq.publish_to_queue(queue, [f"m{i}" for i in range(n)])


def test_consumer_ids_are_unique_and_valid_names() -> None:
    ids = {default_consumer_id() for _ in range(50)}
    assert len(ids) == 50 and all(re.fullmatch(r"[A-Za-z0-9._:-]{1,200}", i) for i in ids)


@pytest.mark.parametrize("credit", [0, 1_000_001])
def test_credit_out_of_range_is_refused_before_connecting(credit: int) -> None:
    with pytest.raises(ValueError, match="credit must be from 1 to 1000000"):
        Consumer("http://127.0.0.1:1", None, "q", "g", credit=credit)
    with pytest.raises(ValueError):
        AsyncConsumer("http://127.0.0.1:1", None, "q", "g", credit=credit)


def test_manual_acks_and_a_nack_that_comes_back(shared_server: ServerProcess, name: str) -> None:
    with Client(shared_server.url) as mq:
        _fill(mq, name, 3)
        with mq.consume(name, "g", auto_ack=False, credit=10) as stream:
            first, second, third = (stream.next(timeout=10) for _ in range(3))
            assert [m.body for m in (first, second, third) if m] == ["m0", "m1", "m2"]
            stream.ack([first])  # type: ignore[list-item]
            stream.nack([second.offset], requeue=True)  # type: ignore[union-attr]
            again = stream.next(timeout=10)
            assert again is not None and (again.body, again.delivery_count) == ("m1", 2)
            stream.ack_up_to(again.offset + 2)  # the rest: m1 and m2
            assert stream.next(timeout=0.2) is None  # nothing more, and still open
        assert _settled(lambda: _position(mq, name), (3, 0, 0)) == (3, 0, 0)


def test_auto_ack_acks_what_the_loop_moved_past(shared_server: ServerProcess, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.url) as mq:
            await mq.declare_queue(name)
            await mq.declare_group(name, "g")
            await mq.publish_to_queue(name, ["a", "b", "c"])
            async with mq.consume(name, "g") as stream:
                got = [(await stream.next(timeout=10)) for _ in range(2)]
                assert [m.body for m in got if m] == ["a", "b"]
            # closed while "b" was the loop's: done; "c" was buffered, not handed out: back to the group
            with Client(shared_server.url) as blocking:
                assert await asyncio.to_thread(_settled, lambda: _position(blocking, name), (2, 1, 0)) == (2, 1, 0)
            async with mq.consume(name, "g") as stream:
                assert (await stream.next(timeout=10)).body == "c"  # type: ignore[union-attr]
                await stream.close()
                await stream.close()  # twice is fine
                assert await stream.next(timeout=0.1) is None  # closed: no more messages

    asyncio.run(scenario())


def test_a_stream_on_a_missing_queue_is_refused_with_its_code(shared_server: ServerProcess, name: str) -> None:
    with (Client(shared_server.url) as mq, pytest.raises(NotFound) as refused,
          mq.consume(f"{name}-missing", "g", retry_for=2) as stream):
        stream.next(timeout=5)
    assert refused.value.code == "queue_not_found"
