"""app/alerts/jobs.py: the alerts object the app runs (in-process app, real SQLite, real SMTP server):
the test mail, the history it writes, and a history write that fails without breaking the mail path."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import text

from chunkmq.alerts.errors import MailFailed, SmtpNotConfigured
from chunkmq.meta.alerts import NewAlertEvent
from tests.alerts.harness import T0, running, settings
from tests.mailbox import Mailbox
from tests.server import free_port


def test_a_test_mail_goes_to_the_default_recipients_and_is_recorded(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        configured = settings(tmp_path / "data", mailbox.port, smtp_to="ops@example.com, dev@example.com")
        async with running(configured) as run:
            assert await run.alerts.test_email() == "250 2.0.0 queued"
            [mail] = mailbox.received
            assert mail.recipients == ["ops@example.com", "dev@example.com"]
            assert "http://console.test:8080" in mail.part("plain")
            [event] = [e for e in run.events() if e.type == "mail"]
            assert (event.state, event.detail) == (
                "sent", "test mail to ops@example.com, dev@example.com: 250 2.0.0 queued")

    asyncio.run(scenario())


def test_a_refused_test_mail_raises_mail_failed_and_is_recorded_as_failed(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            mailbox.refuse_next(1)
            with pytest.raises(MailFailed, match=r"451 4\.3\.0 mailbox busy"):
                await run.alerts.test_email(["me@example.com"])
            [event] = [e for e in run.events() if e.type == "mail"]
            assert (event.state, event.detail) == (
                "failed", "test mail to me@example.com: 451 4.3.0 mailbox busy, try again later")

    asyncio.run(scenario())


@pytest.mark.parametrize(("overrides", "message"), [
    ({"smtp_host": ""}, "CHUNKMQ_SMTP_HOST is not set"),
    ({"smtp_to": ""}, 'no recipients: give "to" or set CHUNKMQ_SMTP_TO'),
])
def test_a_test_mail_without_a_server_or_recipients_is_refused_before_connecting(
    tmp_path: Path, overrides: dict[str, str], message: str
) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", free_port(), **overrides)) as run:
            with pytest.raises(SmtpNotConfigured) as refused:
                await run.alerts.test_email()
            assert str(refused.value) == message
            assert [e for e in run.events() if e.type == "mail"] == []

    asyncio.run(scenario())


def test_a_history_write_that_fails_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", free_port())) as run:
            with run.app.state.broker.meta.engine.begin() as db:
                db.execute(text("DROP TABLE alert_events"))
            await run.alerts.record([NewAlertEvent(T0, "mail", "sent", "test")])

    with caplog.at_level(logging.ERROR, logger="chunkmq.alerts"):
        asyncio.run(scenario())
    assert "could not record 1 alert event(s)" in caplog.text

