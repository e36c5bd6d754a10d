"""Running a coroutine at once, outside any task, until it first waits.

A publish in fsync=interval, its token known, never waits: run in a task it costs the task and a
turn of the event loop before its answer can go out. `start` runs it in the caller's callback; only
a coroutine that does wait (an fsync, a token's first lookup) goes on in a task, from where it
stopped. Such a coroutine must not use what needs a current task (`asyncio.timeout`) before its
first wait.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def start(coroutine: Coroutine[Any, Any, T]) -> tuple[bool, Any]:
    """(True, its result) when `coroutine` finished without waiting, else (False, a coroutine that
    goes on with it: make it a task). Its exception, if it raises before waiting, is raised here."""
    try:
        waits_for = coroutine.send(None)
    except StopIteration as finished:
        return True, finished.value
    return False, rest(coroutine, waits_for)


async def rest(coroutine: Coroutine[Any, Any, T], waits_for: Any) -> T:
    """The rest of a coroutine that yielded `waits_for` (its first wait): what a task runs to go on with it."""
    return await _Resumed(coroutine, waits_for)  # type: ignore[no-any-return]


class _Resumed:
    """What a task does with a coroutine, from the point where it yielded `waits_for` (the future it
    awaits): each value or exception the task sends goes on into the coroutine."""

    __slots__ = ("coroutine", "waits_for")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], waits_for: Any) -> None:
        self.coroutine = coroutine
        self.waits_for = waits_for

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, waits_for = self.coroutine, self.waits_for
        while True:
            try:
                sent = yield waits_for
            except BaseException as exc:  # cancelled: the coroutine sees it where it waits
                step, value = coroutine.throw, exc
            else:
                step, value = coroutine.send, sent
            try:
                waits_for = step(value)
            except StopIteration as finished:
                return finished.value
