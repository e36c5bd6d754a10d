"""A future that resumes its waiter in the call that ends it (app/api/wake.py drives such waiters)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Wake(asyncio.Future[Any]):
    """A future that `fire` ends and, when app/api/wake.py's `run` parked a coroutine on it, resumes
    that coroutine there and then. Awaited in a task, it is an ordinary future."""

    resume: Callable[[], None] | None = None

    def fire(self, value: Any) -> None:
        """End the wait with `value` (nothing if it has ended already)."""
        if self.done():
            return
        self.set_result(value)
        self._resume()

    def fail(self, exc: BaseException) -> None:
        """End the wait with `exc`, raised in the waiter."""
        if self.done():
            return
        self.set_exception(exc)
        self._resume()

    def settle(self, error: BaseException | None) -> None:
        """`fire` with None, or `fail` with `error`: the form of a callback of the fsync (Store.when_durable)."""
        if error is None:
            self.fire(None)
        else:
            self.fail(error)

    def _resume(self) -> None:
        resume, self.resume = self.resume, None
        if resume is not None:
            resume()
