"""Mail delivery: a refusing or unreachable SMTP server is retried with backoff, every attempt is
recorded in the alert history with the server's answer, and the outbox survives a crash."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.alerts.harness import T0, running, settings
from tests.mailbox import Mailbox
from tests.server import ServerProcess, free_port


def test_a_refusing_server_is_retried_until_it_takes_the_mail(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, smtp_attempts=4)) as run:
            await run.rule(kind="lag_messages", threshold=1, recipients=["team@example.com"])
            await run.queue("q", "g")
            await run.publish("q", 3)
            mailbox.refuse_next(2)
            await run.tick(T0)
            [mail] = mailbox.received
            assert mail.recipients == ["team@example.com"]  # the rule's recipients, not the default
            attempts = [(e.state, e.detail) for e in run.events() if e.type == "mail"]
            assert [state for state, _ in attempts] == ["failed", "failed", "sent"]
            assert "attempt 1/4 to team@example.com: 451 4.3.0 mailbox busy" in attempts[0][1]
            assert attempts[2][1].startswith("to team@example.com: 2")  # the server's 250 answer
            assert (run.alerts.outbox.failed, run.alerts.outbox.sent) == (2, 1)
            metrics = (await run.http.get("/metrics")).text
            assert 'chunkmq_alert_firing{group="g",kind="lag_messages",queue="q",rule="' in metrics
            assert "chunkmq_alert_mail_failures_total 2.0" in metrics
            assert "chunkmq_alert_mails_waiting 0.0" in metrics

    asyncio.run(scenario())


def test_an_unreachable_server_is_given_up_after_the_attempts_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        config = settings(tmp_path / "data", free_port(), smtp_attempts=3)  # nothing listens there
        async with running(config) as run:
            await run.rule(kind="lag_messages", threshold=1)
            await run.queue("q", "g")
            await run.publish("q", 3)
            await run.tick(T0)
            failed = run.events(state="failed")
            assert [e.detail.split(":")[0] for e in failed] == [
                "attempt 1/3 to ops@example.com", "attempt 2/3 to ops@example.com", "attempt 3/3 to ops@example.com"]
            assert all("SMTPConnectError" in e.detail for e in failed)
            assert run.alerts.outbox.given_up == 1
            # the alert itself is still firing and shown as such
            assert run.firing() == [("lag_messages", "q", "g")]

    with caplog.at_level(logging.WARNING, logger="chunkmq.alerts"):
        asyncio.run(scenario())
    assert "giving up" in caplog.text


def test_test_email_reports_the_servers_answer(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, smtp_password="s3cret-pw")) as run:
            ok = await run.call("POST", "/api/v1/alerts/test-email", json={"to": ["me@example.com"]})
            assert ok == {"sent": True, "answer": "250 2.0.0 queued"}  # the reply code too (docs/api.md)
            [sent] = [e for e in run.events() if e.type == "mail"]
            assert sent.detail == "test mail to me@example.com: 250 2.0.0 queued"
            [mail] = mailbox.received
            assert mail.recipients == ["me@example.com"] and mail.subject == "[chunkmq] test mail"
            mailbox.refuse_next(1)
            r = await run.http.post("/api/v1/alerts/test-email")
            assert r.status_code == 502 and r.json()["error"]["code"] == "smtp_failed"
            assert "451 4.3.0 mailbox busy" in r.json()["error"]["message"]
            assert [e.state for e in run.events() if e.type == "mail"] == ["sent", "failed"]
            shown = await run.call("GET", "/api/v1/alerts/settings")
            assert shown["smtp"]["password_set"] is True and "s3cret-pw" not in str(shown)
            r = await run.http.post("/api/v1/alerts/test-email", json={"to": ["not an address"]})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body"

    asyncio.run(scenario())


def test_test_email_without_smtp_host_is_a_clear_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", 25, smtp_host="")) as run:
            r = await run.http.post("/api/v1/alerts/test-email")
            assert r.status_code == 409 and r.json()["error"]["code"] == "smtp_not_configured"

    asyncio.run(scenario())


def test_a_mail_waiting_at_shutdown_is_sent_after_the_restart(
    tmp_path: Path, mailbox: Mailbox, database_url: str
) -> None:
    async def scenario() -> None:
        data = tmp_path / "data"
        config = settings(data, mailbox.port, alert_digest_seconds=3600, database_url=database_url)
        async with running(config) as run:
            await run.rule(kind="lag_messages", threshold=1)
            await run.queue("q", "g")
            await run.publish("q", 3)
            await run.app.state.broker.history.sample(T0)
            await run.alerts.engine.evaluate(T0)  # fires; its mail waits out the digest window
            assert run.alerts.outbox.waiting == 1
        assert mailbox.received == []
        async with running(settings(data, mailbox.port, database_url=database_url), clear_rules=False) as run:
            [mail] = await mailbox.arrived(1)
            assert mail.subject.startswith("[chunkmq] FIRING lag_messages q/g")
            await run.alerts.outbox.drain()
            assert run.alerts.outbox.waiting == 0 and run.alerts.repo.outbox() == []

    asyncio.run(scenario())


def test_the_outbox_survives_kill_9_and_its_mail_goes_out_once(tmp_path: Path, mailbox: Mailbox) -> None:
    """A real server killed with SIGKILL while its FIRING mail waits to be retried: the mail arrives
    once, after the restart, and its attempts are counted on across the restart (the backoff state is
    kept in the outbox too)."""
    mailbox.refuse_next(1000)
    server = ServerProcess(
        tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_SMTP_HOST="127.0.0.1", CHUNKMQ_SMTP_PORT=str(mailbox.port),
        CHUNKMQ_SMTP_TO="ops@example.com", CHUNKMQ_SMTP_RETRY_SECONDS="0.2", CHUNKMQ_SMTP_ATTEMPTS="5",
        CHUNKMQ_ALERT_INTERVAL_SECONDS="0.1", CHUNKMQ_ALERT_DIGEST_SECONDS="0.05",
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as api:
            for rule in api.get("/api/v1/alerts/rules").json():
                api.delete(f"/api/v1/alerts/rules/{rule['id']}").raise_for_status()
            api.post("/api/v1/alerts/rules", json={"kind": "lag_messages", "threshold": 1}).raise_for_status()
            api.put("/api/v1/queues/q").raise_for_status()
            api.put("/api/v1/queues/q/groups/g", json={"start": "earliest"}).raise_for_status()
            api.post("/api/v1/queues/q/publish", json={"messages": [{"body": "m"}] * 3}).raise_for_status()
            wait_until(lambda: mail_events(api))  # the first attempt was refused
        server.kill()
        assert mailbox.received == []

        mailbox.refuse_next(1)  # the first attempt after the restart fails too
        server.start()
        [mail] = mailbox.wait_for(1)
        time.sleep(0.5)  # nothing else comes: not the mail again, and no second FIRING
        assert len(mailbox.received) == 1
        assert mail.subject.startswith("[chunkmq] FIRING lag_messages q/g")
        with httpx.Client(base_url=server.url, timeout=10) as api:
            wait_until(lambda: any(e["state"] == "sent" for e in mail_events(api)))
            events = mail_events(api)
        failed = [e["detail"].split(" to ")[0] for e in events if e["state"] == "failed"]
        assert failed[-1] == f"attempt {len(failed)}/5" and len(failed) >= 2, failed  # counted on, not from 1
        assert [e["state"] for e in events].count("sent") == 1
    finally:
        server.stop()


def mail_events(api: httpx.Client) -> list[dict[str, Any]]:
    """The mail attempts in the alert history, oldest first."""
    return [e for e in reversed(api.get("/api/v1/alerts/events").json()) if e["type"] == "mail"]


def wait_until(check: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
