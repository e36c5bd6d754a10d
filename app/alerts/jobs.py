"""The alerts as the app runs them: one object the lifespan opens, whose jobs it starts and stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import make_msgid

from chunkmq.alerts.engine import AlertEngine, AlertView, now_ms
from chunkmq.alerts.errors import MailFailed, SmtpNotConfigured
from chunkmq.alerts.mail import MailError, send
from chunkmq.alerts.outbox import Outbox
from chunkmq.broker.broker import Broker
from chunkmq.config import Settings
from chunkmq.meta import MetaStore
from chunkmq.meta.alerts import AlertRepository, NewAlertEvent

log = logging.getLogger("chunkmq.alerts")


class Alerts:
    """Rules, engine and outbox of one running broker."""

    def __init__(self, broker: Broker, meta: MetaStore, settings: Settings) -> None:
        self.settings = settings
        self.repo = AlertRepository(meta)
        self.outbox = Outbox(settings, self.repo)
        self.engine = AlertEngine(broker, self.repo, self.outbox)

    async def record(self, events: Sequence[NewAlertEvent]) -> None:
        """Append history; a database error is logged, never raised into the mail path."""
        try:
            await asyncio.to_thread(self.repo.add_events, events)
        except Exception:
            log.exception("could not record %d alert event(s)", len(events))

    async def start(self) -> list[asyncio.Task[None]]:
        """Load the kept states and outbox; returns the outbox's task (the evaluation runs on the app's
        job list)."""
        await self.engine.load()
        await self.outbox.load()
        return [asyncio.create_task(self.outbox.run())]

    async def close(self) -> None:
        await self.outbox.close()

    def firing(self) -> list[AlertView]:
        """The firing alerts, for the console's overview."""
        return self.engine.firing()

    async def test_email(self, to: Sequence[str] = ()) -> str:
        """Send a test mail now (one attempt); returns the SMTP answer. Recorded in the history."""
        recipients = tuple(to) or self.settings.smtp_recipients
        if not self.settings.smtp_host:
            raise SmtpNotConfigured("CHUNKMQ_SMTP_HOST is not set")
        if not recipients:
            raise SmtpNotConfigured("no recipients: give \"to\" or set CHUNKMQ_SMTP_TO")
        msg = EmailMessage()
        msg["Subject"] = "[chunkmq] test mail"
        msg["From"] = self.settings.smtp_from
        msg["To"] = ", ".join(recipients)
        msg["Date"] = datetime.now(UTC)
        msg["Message-ID"] = make_msgid(domain="chunkmq")
        msg.set_content(f"This is a test mail from chunkmq at {self.settings.console_base_url}.\n"
                        f"Alert mails come the same way, from {self.settings.smtp_from}.\n")
        detail = f"test mail to {', '.join(recipients)}: "
        try:
            answer = await send(msg, self.settings)
        except MailError as e:
            await self.record([NewAlertEvent(now_ms(), "mail", "failed", "test", detail=detail + e.answer)])
            raise MailFailed(f"the SMTP server did not take the mail: {e.answer}") from e
        await self.record([NewAlertEvent(now_ms(), "mail", "sent", "test", detail=detail + answer)])
        return answer
