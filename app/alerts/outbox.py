"""The outbox: notices wait here for the digest window, then go out as one mail per set of recipients,
sent in background tasks that retry with backoff. Nothing here ever waits on the broker's paths:
`put` only appends to a list; sending is aiosmtplib's network I/O on the event loop.

Every attempt is recorded as an alert event (`mail` / `sent` or `failed`, with the SMTP answer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from app.alerts.mail import MailError, Notification, compose, send
from app.config import Settings
from app.meta.alerts import NewAlertEvent

log = logging.getLogger("chunkmq.alerts")

MAX_BACKOFF_SECONDS = 300.0

Recorder = Callable[[Sequence[NewAlertEvent]], Awaitable[None]]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def newest(notes: Sequence[Notification]) -> list[Notification]:
    """The newest notice of each alert and kind of notice: reminders queued behind a failing server
    do not repeat in the mail that finally gets through."""
    latest: dict[tuple[int, str, str, str], Notification] = {}
    for n in notes:
        key = (n.rule.id, n.observation.queue, n.observation.group, n.notice.value)
        latest.pop(key, None)
        latest[key] = n
    return list(latest.values())


class Outbox:
    """Owned by the event loop; `run()` is one of the app's background jobs."""

    def __init__(self, settings: Settings, record: Recorder) -> None:
        self.settings = settings
        self._record = record
        self._pending: list[Notification] = []
        self._wake = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        self._queues: dict[tuple[str, ...], list[Notification]] = {}  # recipients -> notices to send
        self.sent = 0  # mails delivered since start
        self.failed = 0  # attempts that failed since start
        self.given_up = 0  # mails dropped after the last attempt

    def put(self, notifications: Sequence[Notification]) -> None:
        if notifications:
            self._pending.extend(notifications)
            self._wake.set()

    def recipients_of(self, n: Notification) -> tuple[str, ...]:
        return n.rule.recipients or self.settings.smtp_recipients

    async def run(self) -> None:
        """Forever: wait for a notice, let the digest window fill, send what came."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.settings.alert_digest_seconds)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Start sending everything pending: one mail per distinct set of recipients. Notices for
        recipients whose mail is still being retried join that mail's next attempt, so a dead SMTP
        server costs one connection per backoff step, however many alerts fire meanwhile."""
        batch, self._pending = self._pending, []
        if not self.settings.smtp_host:
            if batch:
                log.info("%d alert notice(s) not mailed: CHUNKMQ_SMTP_HOST is not set", len(batch))
            return
        for n in batch:
            recipients = self.recipients_of(n)
            if not recipients:
                log.warning("alert notice for rule %d has no recipients (set CHUNKMQ_SMTP_TO or the rule's)", n.rule.id)
                continue
            waiting = self._queues.get(recipients)
            if waiting is not None:
                waiting.append(n)
                continue
            self._queues[recipients] = [n]
            task = asyncio.create_task(self._deliver(recipients))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _deliver(self, recipients: tuple[str, ...]) -> None:
        """Send the notices queued for `recipients` until none are left, retrying with backoff."""
        queue = self._queues[recipients]
        attempts = self.settings.smtp_attempts
        attempt, delay = 0, self.settings.smtp_retry_seconds
        try:
            while queue:
                notes = list(queue)
                attempt += 1
                message = compose(newest(notes), self.settings, recipients)
                try:
                    answer = await send(message, self.settings)
                except MailError as e:
                    self.failed += 1
                    last = attempt >= attempts
                    log.warning("alert mail %r to %s failed (attempt %d of %d): %s%s", str(message["Subject"]),
                                ", ".join(recipients), attempt, attempts, e.answer,
                                "; giving up" if last else f"; again in {delay:.1f} s")
                    detail = f"attempt {attempt}/{attempts} to {', '.join(recipients)}: {e.answer}"
                    # A retried digest is one event per attempt, not one per alert: a long outage of
                    # the SMTP server must not write thousands of rows a minute.
                    await self._note(notes if last or len(notes) == 1 else [], "failed", detail, len(notes))
                    if not last:
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, MAX_BACKOFF_SECONDS)
                        continue
                    self.given_up += 1
                else:
                    self.sent += 1
                    await self._note(notes, "sent", f"to {', '.join(recipients)}: {answer}")
                del queue[:len(notes)]  # notices that came in meanwhile stay for the next mail
                attempt, delay = 0, self.settings.smtp_retry_seconds
        finally:
            del self._queues[recipients]

    async def _note(self, notes: list[Notification], state: str, detail: str, count: int | None = None) -> None:
        """One mail event per alert in `notes`; with no notes, one event for the whole mail."""
        now = _now_ms()
        count = len(notes) if count is None else count
        detail += f" (digest of {count})" if count > 1 else ""
        await self._record([
            NewAlertEvent(now, "mail", state, n.notice.value, n.rule.id, n.rule.kind, n.observation.queue,
                          n.observation.group, n.observation.value, n.rule.threshold, detail)
            for n in notes
        ] or [NewAlertEvent(now, "mail", state, "digest", detail=detail)])

    async def drain(self) -> None:
        """Send what is pending now and wait until every mail is delivered or given up."""
        self.flush()
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
