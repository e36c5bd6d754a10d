"""Wake (app/broker/wake.py): a future whose fire or fail resumes the waiter parked on it in the same
call, and that an ordinary task awaits as any future."""

from __future__ import annotations

import asyncio

import pytest

from chunkmq.broker.wake import Wake


def test_fire_resumes_the_parked_waiter_in_the_call() -> None:
    async def main() -> None:
        wake = Wake()
        order: list[str] = []
        wake.resume = lambda: order.append(f"resumed with {wake.result()}")
        wake.fire(7)
        order.append("after fire")
        assert order == ["resumed with 7", "after fire"]
        assert wake.resume is None  # resumed once: the hook is taken
        wake.fire(8)  # ended already: nothing changes, nothing resumes
        assert wake.result() == 7 and order == ["resumed with 7", "after fire"]

    asyncio.run(main())


def test_fail_ends_the_wait_with_the_error() -> None:
    async def main() -> None:
        wake = Wake()
        resumed: list[bool] = []
        wake.resume = lambda: resumed.append(True)
        wake.fail(LookupError("gone"))
        assert resumed == [True]
        with pytest.raises(LookupError, match="gone"):
            wake.result()
        wake.fail(ValueError("late"))  # ended already
        with pytest.raises(LookupError):
            wake.result()

    asyncio.run(main())


def test_in_a_task_it_is_an_ordinary_future() -> None:
    async def main() -> None:
        wake = Wake()
        waiter = asyncio.ensure_future(wake)
        await asyncio.sleep(0)
        assert not waiter.done()
        wake.fire("m")  # no parked coroutine: the task is woken by the loop
        assert await waiter == "m"

    asyncio.run(main())
