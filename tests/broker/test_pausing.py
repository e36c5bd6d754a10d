"""Pausing a group: the pause body, the timer heap, and a real broker that delivers nothing while
paused, resumes by itself at until_ms, and keeps the pause across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chunkmq.broker.broker import Broker
from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.group import Group, now_ms
from chunkmq.broker.pausing import PauseTimers, parse_pause
from tests.broker.conftest import with_broker


def test_the_pause_body_takes_a_future_until_ms_or_nothing() -> None:
    assert parse_pause({}, 1000) is None
    assert parse_pause({"until_ms": None}, 1000) is None
    assert parse_pause({"until_ms": 1001}, 1000) == 1001
    for bad in (1000, 999, -1, 1.5, "2000", True, 2**63):
        with pytest.raises(InvalidInput, match="until_ms"):
            parse_pause({"until_ms": bad}, 1000)
    with pytest.raises(InvalidInput, match="unknown field"):
        parse_pause({"until": 2000}, 1000)


def test_timers_end_timed_pauses_in_order_and_skip_stale_entries() -> None:
    timers = PauseTimers()
    a, b, c = (Group(1, name, next_offset=0) for name in "abc")
    a.pause(300)
    b.pause(100)
    c.pause(None)  # until resumed: no timer
    for g in (a, b, c):
        timers.add(g)
    assert len(timers) == 2
    assert timers.due(99) == []
    assert timers.due(100) == [b] and not b.paused
    a.pause(500)  # paused again for longer: the entry at 300 is stale
    timers.add(a)
    assert timers.due(400) == [] and a.paused
    assert timers.due(500) == [a] and not a.paused and c.paused


def test_a_timed_pause_ends_for_whoever_looks_first() -> None:
    g = Group(1, "g", next_offset=0)
    g.pause(now_ms() + 60_000)
    assert g.is_paused()
    g.pause(now_ms() - 1)
    assert not g.is_paused() and (g.paused, g.paused_until_ms) == (False, None)


async def _fill(broker: Broker, n: int) -> None:
    await broker.declare_queue("q", {})
    await broker.publish("", [{"body": str(i), "routing_key": "q"} for i in range(n)], queue_name="q")
    await broker.declare_group("q", "g", {})


def test_a_paused_group_delivers_nothing_until_resumed(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _fill(broker, 5)
        paused = await broker.pause_group("q", "g", {})
        assert (paused.paused, paused.paused_until_ms) == (True, None)
        assert await broker.pull("q", "g", 10, 0, "c1") == b'{"messages":[]}'
        waiting = asyncio.create_task(broker.pull("q", "g", 10, 5000, "c1"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # a long poll waits while paused
        await broker.resume_group("q", "g", {})
        answer = await asyncio.wait_for(waiting, 2)
        assert answer.count(b'"offset"') == 5
        with pytest.raises(InvalidInput):
            await broker.resume_group("q", "g", {"now": True})

    with_broker(tmp_path, work)


def test_a_timed_pause_resumes_by_itself_and_wakes_a_waiting_pull(tmp_path: Path) -> None:
    async def work(broker: Broker) -> None:
        await _fill(broker, 3)
        sweeping = asyncio.create_task(_sweep(broker))
        until = now_ms() + 400
        await broker.pause_group("q", "g", {"until_ms": until})
        answer = await broker.pull("q", "g", 10, 5000, "c1")
        assert now_ms() >= until and answer.count(b'"offset"') == 3
        assert now_ms() - until < 300
        sweeping.cancel()

    with_broker(tmp_path, work)


async def _sweep(broker: Broker) -> None:
    while True:
        broker.sweep()
        await asyncio.sleep(0.1)


def test_the_pause_survives_a_restart_and_an_ended_one_does_not(tmp_path: Path) -> None:
    async def pause(broker: Broker) -> None:
        await _fill(broker, 2)
        await broker.declare_group("q", "timed", {})
        await broker.pause_group("q", "g", {})
        await broker.pause_group("q", "timed", {"until_ms": now_ms() + 300})

    with_broker(tmp_path, pause)

    async def check(broker: Broker) -> None:
        g, timed = broker.queue("q").groups["g"], broker.queue("q").groups["timed"]
        assert g.paused and timed.paused
        assert await broker.pull("q", "g", 10, 0, "c1") == b'{"messages":[]}'
        await asyncio.sleep(0.4)
        assert (await broker.pull("q", "timed", 10, 0, "c1")).count(b'"offset"') == 2
        await broker.resume_group("q", "g", {})

    with_broker(tmp_path, check)

    async def resumed(broker: Broker) -> None:
        q = broker.queue("q")
        assert not q.groups["g"].paused and not q.groups["timed"].paused

    with_broker(tmp_path, resumed)
