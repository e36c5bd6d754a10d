"""The outbox: notices wait here for the digest window, then go out as one mail per set of recipients,
sent in background tasks that retry with backoff. Nothing here ever waits on the broker's paths:
`put` only appends to a list; sending is aiosmtplib's network I/O on the event loop.

The outbox is kept in SQLite (`alert_outbox`): the engine queues a notice in the transaction that
records its transition, and a notice leaves only when the SMTP server accepted its mail (or the last
attempt failed). A notice queued before a crash or a shutdown is mailed after the restart, with its
attempt count and backoff carried over. The one duplicate left is SMTP's own: a crash after the
server accepted a mail and before the outbox forgot it sends that mail again (at least once); the
resent mail has the same Message-ID, so mail systems that deduplicate can.

Every attempt is recorded as an alert event (`mail` / `sent` or `failed`, with the SMTP answer).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from chunkmq.alerts.mail import MailError, Notification, compose, send
from chunkmq.alerts.rules import Observation
from chunkmq.alerts.state import Notice
from chunkmq.config import Settings
from chunkmq.meta.alerts import AlertRepository, AlertRuleRow, NewAlertEvent, NewOutboxMail, OutboxRow

log = logging.getLogger("chunkmq.alerts")

MAX_BACKOFF_SECONDS = 300.0


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


def to_json(n: Notification) -> dict[str, Any]:
    """A notification as the outbox row keeps it (plain JSON)."""
    rule = asdict(n.rule)
    rule.update(recipients=list(n.rule.recipients), created_at=n.rule.created_at.isoformat(),
                updated_at=n.rule.updated_at.isoformat())
    return {"notice": n.notice.value, "rule": rule, "observation": asdict(n.observation), "at_ms": n.at_ms,
            "fired_at_ms": n.fired_at_ms, "trend": [list(p) for p in n.trend]}


def from_json(d: dict[str, Any]) -> Notification:
    r = d["rule"]
    rule = AlertRuleRow(**{**r, "recipients": tuple(r["recipients"]),
                           "created_at": datetime.fromisoformat(r["created_at"]),
                           "updated_at": datetime.fromisoformat(r["updated_at"])})
    return Notification(Notice(d["notice"]), rule, Observation(**d["observation"]), d["at_ms"], d["fired_at_ms"],
                        tuple((int(t), int(lag), float(s)) for t, lag, s in d["trend"]))


def message_id(ids: Sequence[int]) -> str:
    """The same notices give the same Message-ID, also when a crash makes the mail go out twice."""
    digest = hashlib.sha256(",".join(map(str, sorted(ids))).encode()).hexdigest()[:16]
    return f"<alert-{min(ids)}-{digest}@chunkmq>"


def backoff(settings: Settings, attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, ...): doubling, at most 5 minutes."""
    return min(settings.smtp_retry_seconds * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS)


@dataclass(frozen=True, slots=True)
class Letter:
    """A notice addressed, with its outbox row (`id`) and the attempts its mail has had."""

    notification: Notification
    recipients: tuple[str, ...]
    id: int = 0
    attempts: int = 0
    next_at_ms: int = 0

    def row(self) -> NewOutboxMail:
        return NewOutboxMail(self.notification.at_ms, self.recipients, to_json(self.notification))

    @staticmethod
    def of(row: OutboxRow) -> Letter:
        return Letter(from_json(row.notice), row.recipients, row.id, row.attempts, row.next_at_ms)


class Outbox:
    """Owned by the event loop; `run()` is one of the app's background jobs."""

    def __init__(self, settings: Settings, repo: AlertRepository) -> None:
        self.settings = settings
        self.repo = repo
        self._pending: list[Letter] = []
        self._wake = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        self._queues: dict[tuple[str, ...], list[Letter]] = {}  # recipients -> letters to send
        self.sent = 0  # mails delivered since start
        self.failed = 0  # attempts that failed since start
        self.given_up = 0  # mails dropped after the last attempt

    def can_mail(self, rule: AlertRuleRow) -> bool:
        """Whether a notice of `rule` can be mailed: an SMTP host and recipients are set."""
        return bool(self.settings.smtp_host and (rule.recipients or self.settings.smtp_recipients))

    def address(self, notifications: Sequence[Notification]) -> list[Letter]:
        """The notices that can be mailed, with their recipients (the engine queues these in the
        outbox table with the transitions); the others are logged and dropped."""
        if notifications and not self.settings.smtp_host:
            log.info("%d alert notice(s) not mailed: CHUNKMQ_SMTP_HOST is not set", len(notifications))
            return []
        out = []
        for n in notifications:
            recipients = n.rule.recipients or self.settings.smtp_recipients
            if recipients:
                out.append(Letter(n, recipients))
            else:
                log.warning("alert notice for rule %d has no recipients (set CHUNKMQ_SMTP_TO or the rule's)", n.rule.id)
        return out

    def put(self, letters: Sequence[Letter]) -> None:
        if letters:
            self._pending.extend(letters)
            self._wake.set()

    @property
    def waiting(self) -> int:
        """Notices not mailed yet (in the digest window or behind a failing server)."""
        return len(self._pending) + sum(len(q) for q in self._queues.values())

    async def load(self) -> None:
        """Pick up what the previous run left in the outbox; it goes out at the next flush."""
        rows = await asyncio.to_thread(self.repo.outbox)
        if rows:
            log.info("%d alert notice(s) left in the outbox by the previous run: sending", len(rows))
            self.put([Letter.of(r) for r in rows])

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
        for letter in batch:
            waiting = self._queues.get(letter.recipients)
            if waiting is not None:
                waiting.append(letter)
                continue
            self._queues[letter.recipients] = [letter]
            task = asyncio.create_task(self._deliver(letter.recipients))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _deliver(self, recipients: tuple[str, ...]) -> None:
        """Send the letters queued for `recipients` until none are left, retrying with backoff."""
        queue = self._queues[recipients]
        attempts = self.settings.smtp_attempts
        try:
            while queue:
                letters = list(queue)
                # Letters from before a restart go on where they were: same attempt count, same wait.
                attempt = max(x.attempts for x in letters) + 1
                wait_ms = max(x.next_at_ms for x in letters) - _now_ms()
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000)
                    letters = list(queue)  # and whatever joined meanwhile
                ids = [x.id for x in letters]
                notes = [x.notification for x in letters]
                message = compose(newest(notes), self.settings, recipients, message_id(ids))
                try:
                    answer = await send(message, self.settings)
                except MailError as e:
                    self.failed += 1
                    last = attempt >= attempts
                    delay = backoff(self.settings, attempt)
                    log.warning("alert mail %r to %s failed (attempt %d of %d): %s%s", str(message["Subject"]),
                                ", ".join(recipients), attempt, attempts, e.answer,
                                "; giving up" if last else f"; again in {delay:.1f} s")
                    detail = f"attempt {attempt}/{attempts} to {', '.join(recipients)}: {e.answer}"
                    # A retried digest is one event per attempt, not one per alert: a long outage of
                    # the SMTP server must not write thousands of rows a minute.
                    events = self._events(notes if last or len(notes) == 1 else [], "failed", detail, len(notes))
                    if not last:
                        next_at = _now_ms() + int(delay * 1000)
                        await self._write(self.repo.mail_failed, ids, attempt, next_at, events)
                        queue[:len(letters)] = [replace(x, attempts=attempt, next_at_ms=next_at) for x in letters]
                        continue
                    self.given_up += 1
                    await self._write(self.repo.mail_done, ids, events)
                else:
                    self.sent += 1
                    events = self._events(notes, "sent", f"to {', '.join(recipients)}: {answer}")
                    await self._write(self.repo.mail_done, ids, events)
                del queue[:len(letters)]  # letters that came in meanwhile stay for the next mail
        finally:
            del self._queues[recipients]

    @staticmethod
    def _events(notes: list[Notification], state: str, detail: str, count: int | None = None) -> list[NewAlertEvent]:
        """One mail event per alert in `notes`; with no notes, one event for the whole mail."""
        now = _now_ms()
        count = len(notes) if count is None else count
        detail += f" (digest of {count})" if count > 1 else ""
        return [
            NewAlertEvent(now, "mail", state, n.notice.value, n.rule.id, n.rule.kind, n.observation.queue,
                          n.observation.group, n.observation.value, n.rule.threshold, detail)
            for n in notes
        ] or [NewAlertEvent(now, "mail", state, "digest", detail=detail)]

    @staticmethod
    async def _write(call: Callable[..., None], *args: Any) -> None:
        """A database error is logged, never raised into the mail path (the mail may then go out
        again after a restart: at least once)."""
        try:
            await asyncio.to_thread(call, *args)
        except Exception:
            log.exception("could not record an alert mail in the outbox")

    async def drain(self) -> None:
        """Send what is pending now and wait until every mail is delivered or given up."""
        self.flush()
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def close(self) -> None:
        """Stop sending; what is not sent stays in the outbox table for the next start."""
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
