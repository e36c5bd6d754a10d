"""app/api/eager.py: a coroutine run at once until it first waits, then in a task from there."""

from __future__ import annotations

import asyncio

import pytest

from chunkmq.api import eager


async def _add(steps: list[str], future: asyncio.Future[int] | None, fail: str = "") -> int:
    steps.append("started")
    if fail == "before":
        raise ValueError("before")
    got = await future if future is not None else 0
    steps.append(f"got {got}")
    if fail == "after":
        raise ValueError("after")
    return got + 1


def test_a_coroutine_that_never_waits_finishes_in_the_call() -> None:
    steps: list[str] = []
    assert eager.start(_add(steps, None)) == (True, 1)
    assert steps == ["started", "got 0"]
    with pytest.raises(ValueError, match="before"):
        eager.start(_add([], None, "before"))


def test_a_coroutine_that_waits_goes_on_in_a_task_from_where_it_stopped() -> None:
    async def main() -> None:
        steps: list[str] = []
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        finished, rest = eager.start(_add(steps, future))
        assert not finished and steps == ["started"]  # ran up to its wait, in this call
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        future.set_result(41)
        assert await task == 42 and steps == ["started", "got 41"]

        failing: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(eager.start(_add([], failing, "after"))[1])
        failing.set_result(1)
        with pytest.raises(ValueError, match="after"):
            await task

        waiting: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(eager.start(_add(steps, waiting))[1])
        await asyncio.sleep(0)
        task.cancel()  # the coroutine sees the cancellation where it waits
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waiting.cancelled()

    asyncio.run(main())
