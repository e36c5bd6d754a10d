"""Group commit of consumer-group state: many acknowledgements share one database write.

The broker changes group state in memory on the event loop; a `Committer` writes it behind in
rounds. A round takes what changed, waits until the message log is fsynced up to where those groups
point (so a saved position never covers a message that a crash of the machine could take back),
then writes every changed group in one transaction.

- Write-behind (fsync=interval / never): a round every `interval` seconds.
- Durable acks (fsync=always): an ack's answer awaits `durable()`, which wakes the committer; the
  round that starts next covers it. Acks arriving during a round wait for the following one, so a
  burst of acks costs one fsync and one transaction per round, nothing per ack.

Invariant: a waiter is resolved only by a round whose snapshot was taken after the waiter's change:
waiters are taken and the snapshot is built with no `await` in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from chunkmq.broker.errors import Unavailable

log = logging.getLogger("chunkmq.broker")
FAILURE_LOG_SECONDS = 10.0


class Committer:
    def __init__(self, commit: Callable[[], Awaitable[int]], interval: float) -> None:
        self._commit = commit  # builds its snapshot before its first await
        self._interval = interval
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one round at a time (the loop and the final flush)

    def durable(self) -> asyncio.Future[None]:
        """A future resolved once a round started after this call has written its state."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._wake.set()
        return future

    async def run(self) -> None:
        """The background task: a round when woken by a waiter, or every interval."""
        failing_since: float | None = None
        logged = 0.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval)
            except TimeoutError:
                pass
            try:
                await self.round()
            except Exception:
                # One traceback per outage (a database restart would log ten a second), then a line
                # every FAILURE_LOG_SECONDS while it lasts.
                now = time.monotonic()
                if failing_since is None:
                    log.exception("writing consumer group state failed; retrying")
                    failing_since = logged = now
                elif now - logged >= FAILURE_LOG_SECONDS:
                    log.warning("writing consumer group state has failed for %.0f s; retrying", now - failing_since)
                    logged = now
                await asyncio.sleep(min(self._interval, 0.1))
            else:
                if failing_since is not None:
                    log.warning("consumer group state written again after %.1f s", time.monotonic() - failing_since)
                    failing_since = None

    async def round(self) -> int:
        """One round: write what changed, then resolve the waiters it covers. Returns groups written."""
        async with self._lock:
            self._wake.clear()
            waiters, self._waiters = self._waiters, []
            try:
                written = await self._commit()
            except BaseException as exc:
                for future in waiters:
                    if not future.done():
                        future.set_exception(Unavailable(f"the acknowledgement could not be made durable: {exc}"))
                raise
            for future in waiters:
                if not future.done():
                    future.set_result(None)
            return written
