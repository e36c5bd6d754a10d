"""A wait that is resumed inside the call that ends it: a long poll answered within the publish.

A pull that waits for messages is handed them by the publish itself (Queue.push_to). In a task, the
pull would then go on a loop turn later, after the publish has written its own answer, and on a busy
machine after the publisher's process, woken by that answer, has had the CPU. `run` drives such a
coroutine without a task: while it waits on a `Wake`, whoever fires the wake resumes it in the same
call, so its answer is written at once. A coroutine that waits on anything else goes on in a task,
as app/api/eager.py's do. In a task, a Wake is an ordinary future.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from chunkmq.api import eager
from chunkmq.broker.wake import Wake

Spawn = Callable[[Coroutine[Any, Any, None]], object]


class Run:
    """A coroutine driven by `run`; `waiting` is the Wake it is parked on, if it is."""

    __slots__ = ("coroutine", "spawn", "waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, None], spawn: Spawn) -> None:
        self.coroutine = coroutine
        self.spawn = spawn
        self.waiting: Wake | None = None

    def step(self) -> None:
        self.waiting = None
        try:
            waits_for = self.coroutine.send(None)
        except StopIteration:
            return
        self.park(waits_for)

    def park(self, waits_for: Any) -> None:
        """The coroutine yielded `waits_for`: wait on it here if it is a Wake, else go on in a task."""
        if type(waits_for) is Wake:
            waits_for.resume = self.step
            self.waiting = waits_for
        else:
            self.spawn(eager.rest(self.coroutine, waits_for))

    def to_task(self) -> None:
        """Go on in a task from the wait it is parked on (a server shutting down cancels its tasks)."""
        wake, self.waiting = self.waiting, None
        if wake is not None:
            wake.resume = None
            self.spawn(eager.rest(self.coroutine, wake))


def run(coroutine: Coroutine[Any, Any, None], spawn: Spawn) -> Run | None:
    """Run `coroutine` now; while it waits on a Wake it is resumed by the wake's `fire`; at any other
    wait `spawn` gets a coroutine that goes on with it (make it a task). None when it finished at once."""
    try:  # nearly always: it answers without waiting (no Run to make)
        waits_for = coroutine.send(None)
    except StopIteration:
        return None
    driven = Run(coroutine, spawn)
    driven.park(waits_for)
    return driven
