"""The console's Alerts and Settings pages: rules through forms (CSRF, admin only), current alerts,
the history with filters, escaping, the mail settings without the password, a test mail."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from chunkmq.alerts.engine import AlertView
from chunkmq.alerts.jobs import Alerts
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.meta.alerts import NewAlertEvent
from tests.mailbox import Mailbox
from tests.web.conftest import Console, admin_password, console_client, login
from tests.web.test_pages import assert_no_inline_code

pytestmark = pytest.mark.anyio


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    """An SMTP server that wants the login the settings carry."""
    box = Mailbox(login=("mailer", "hunter2-secret"))
    box.controller.start()
    yield box
    box.controller.stop()


@pytest.fixture
async def mail_app(tmp_path: Path, mailbox: Mailbox) -> AsyncIterator[FastAPI]:
    settings = Settings(
        data_dir=tmp_path / "data", chunk_size=1 << 20, index_chunk_entries=1000, alert_interval_seconds=3600,
        smtp_host="127.0.0.1", smtp_port=mailbox.port, smtp_to="ops@example.com", smtp_user="mailer",
        smtp_password="hunter2-secret", alert_digest_seconds=0.01,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def admin(mail_app: FastAPI) -> AsyncIterator[Console]:
    async with console_client(mail_app) as client:
        assert (await login(client, "admin", admin_password(mail_app))).status_code == 303
        yield Console(client)


def rows(html: str, section: str) -> list[str]:
    """The text of each row of the table under the <h2>section</h2>."""
    part = html.split(f"<h2>{section}</h2>", 1)[1].split("</table>", 1)[0]
    found = re.findall(r"<tr>(.*?)</tr>", part, re.S)[1:]
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", r)).strip() for r in found]


async def test_rules_are_added_disabled_and_deleted_through_forms(admin: Console) -> None:
    page = await admin.get("/alerts")
    assert page.status_code == 200
    assert_no_inline_code(page.text)
    assert '<a href="/alerts" class="current" aria-current="page">Alerts</a>' in page.text
    assert '<a href="/settings">Settings</a>' in page.text
    assert page.template == "alerts.html"
    assert [(r.id, r.kind) for r in page.context["rules"]] == [(1, "lag_messages"), (2, "stalled")]
    form = {"kind": "lag_seconds", "threshold": "30", "queue": "orders.*", "group": "", "for_seconds": "60",
            "renotify_seconds": "0", "window_seconds": "", "recipients": "a@example.com, b@example.com",
            "enabled": "yes"}
    assert await admin.act("/alerts/rules", form) == "alert rule 3 created: oldest unacked message ≥ 30 s"
    page = await admin.get("/alerts")
    rule = page.context["rules"][2]
    assert (rule.id, rule.kind, rule.queue, rule.threshold, rule.for_seconds, rule.renotify_seconds, rule.enabled) == (
        3, "lag_seconds", "orders.*", 30, 60, 0, True)
    row = rows(page.text, "Rules")[2]  # how the page words a rule: units, durations, "once"
    assert row.startswith("3 lag_seconds orders.* * oldest unacked message ≥ 30 s 1 min 0 s once "
                          "a@example.com, b@example.com yes")
    refused = await admin.act("/alerts/rules", {**form, "threshold": "lots"})
    assert refused == "Threshold: must be a number, not 'lots'"
    # every bad field is named, in words (no pattern quoted)
    assert await admin.act("/alerts/rules", {**form, "queue": "a b", "recipients": "nobody, ok@example.com"}) == (
        "Queues: 'a b': use 1-200 characters of A-Z a-z 0-9 . _ - : and the wildcards * ? [ ] !; "
        "Recipients: 'nobody' is not an e-mail address")
    assert await admin.act("/alerts/rules", {**form, "threshold": "", "for_seconds": "-1"}) == (
        "Threshold: required; For: must be at least 0 s")
    assert await admin.act("/alerts/rules/3/enabled", {"enabled": ""}) == "alert rule 3 disabled"
    page = await admin.get("/alerts")
    assert [r.enabled for r in page.context["rules"]] == [True, True, False]
    assert rows(page.text, "Rules")[2].endswith("no Enable delete Delete")  # the button now offers Enable
    assert await admin.act("/alerts/rules/3/delete") == "tick the confirmation box to do this"
    assert await admin.act("/alerts/rules/3/delete", {"confirm": "yes"}) == "alert rule 3 deleted"
    assert [r.id for r in (await admin.get("/alerts")).context["rules"]] == [1, 2]
    # Without the session's CSRF token nothing happens.
    forged = await admin.client.post("/alerts/rules/1/delete", data={"confirm": "yes", "csrf": "forged"})
    assert forged.status_code == 403
    assert [r.id for r in (await admin.get("/alerts")).context["rules"]] == [1, 2]


async def test_firing_alerts_and_the_history_are_shown_filtered_and_escaped(
    admin: Console, mail_app: FastAPI, mailbox: Mailbox
) -> None:
    alerts: Alerts = mail_app.state.alerts
    token = (mail_app.state.settings.data_dir / "admin-token").read_text().strip()
    api = {"authorization": f"Bearer {token}"}
    http = admin.client
    assert (await http.put("/api/v1/queues/orders", headers=api)).status_code == 201
    assert (await http.put("/api/v1/queues/orders/groups/billing", json={}, headers=api)).status_code == 201
    body = {"messages": [{"body": "x"}] * 3}
    assert (await http.post("/api/v1/queues/orders/publish", json=body, headers=api)).status_code == 200
    await admin.act("/alerts/rules", {"kind": "lag_messages", "threshold": "1", "queue": "orders", "enabled": "yes"})
    await alerts.engine.evaluate()
    await alerts.outbox.drain()
    def alert(a: AlertView) -> tuple[object, ...]:
        return a.state, a.rule_id, a.kind, a.queue, a.group, a.value, a.threshold

    now = (await admin.get("/alerts")).context["current"]
    assert [alert(a) for a in now] == [("firing", 3, "lag_messages", "orders", "billing", 3, 1)], now
    overview = await admin.get("/")  # the overview lists it too
    assert [alert(a) for a in overview.context["firing"]] == [alert(a) for a in now]
    await alerts.record([NewAlertEvent(1, "mail", "failed", "firing", 3, "lag_messages", "orders", "billing",
                                       3, 1, "<script>alert(1)</script>")])
    page = await admin.get("/alerts", params={"state": "failed"})
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "<script>alert" not in page.text  # escaped
    assert [(e.type, e.state, e.previous, e.rule_id, e.kind, e.queue, e.group, e.value, e.detail)
            for e in page.context["events"]] == [
        ("mail", "failed", "firing", 3, "lag_messages", "orders", "billing", 3, "<script>alert(1)</script>")]
    firing = (await admin.get("/alerts", params={"state": "firing", "queue": "orders"})).context["events"]
    assert [(e.type, e.state, e.previous, e.rule_id, e.kind, e.queue, e.group, e.value) for e in firing] == [
        ("transition", "firing", "pending", 3, "lag_messages", "orders", "billing", 3)]
    assert (await admin.get("/alerts", params={"state": "exploded"})).status_code == 400
    assert len(mailbox.received) == 1


async def test_an_alert_on_a_queue_without_groups_says_so(admin: Console, mail_app: FastAPI) -> None:
    alerts: Alerts = mail_app.state.alerts
    token = (mail_app.state.settings.data_dir / "admin-token").read_text().strip()
    api = {"authorization": f"Bearer {token}"}
    assert (await admin.client.put("/api/v1/queues/unread", headers=api)).status_code == 201
    body = {"messages": [{"body": "x"}] * 2}
    assert (await admin.client.post("/api/v1/queues/unread/publish", json=body, headers=api)).status_code == 200
    await admin.act("/alerts/rules", {"kind": "lag_messages", "threshold": "1", "queue": "unread", "enabled": "yes"})
    await alerts.engine.evaluate()
    page = await admin.get("/alerts")
    [alert] = [a for a in page.context["current"] if a.queue == "unread"]
    assert (alert.kind, alert.group, alert.value) == ("lag_messages", "", 2)
    # the point is the page's words for a queue without groups
    [now] = [row for row in rows(page.text, "Now") if " unread " in row]
    assert "lag_messages unread (no consumer group) 2 messages" in now, now
    history = [row for row in rows(page.text, "History") if " unread " in row]
    assert history and all("(no consumer group)" in row for row in history), history


async def test_settings_show_the_mail_settings_but_never_the_password_and_send_a_test_mail(
    admin: Console, mailbox: Mailbox
) -> None:
    page = await admin.get("/settings")
    assert page.status_code == 200
    assert_no_inline_code(page.text)
    assert page.template == "settings.html"
    s = page.context["s"]
    assert (s.smtp_host, s.smtp_port, s.smtp_user) == ("127.0.0.1", mailbox.port, "mailer")
    assert s.smtp_to == "ops@example.com"
    assert "hunter2" not in page.text  # the page the browser gets is the point
    flash = await admin.act("/settings/test-email", {"to": "me@example.com"})
    assert flash.startswith("test mail sent; the server answered: 2")
    [mail] = mailbox.received
    assert mail.recipients == ["me@example.com"] and mailbox.logins == ["mailer"]
    mailbox.refuse_next(1)
    assert "451 4.3.0 mailbox busy" in await admin.act("/settings/test-email", {"to": ""})


async def test_read_only_users_see_alerts_but_change_nothing(admin: Console, mail_app: FastAPI) -> None:
    await admin.act("/access/users", {"name": "viewer", "password": "viewer-pw-123"})
    async with console_client(mail_app) as client:
        assert (await login(client, "viewer", "viewer-pw-123")).status_code == 303
        viewer = Console(client)
        page = await viewer.get("/alerts")
        assert page.status_code == 200 and "Add a rule" not in page.text
        refused = await viewer.post("/alerts/rules/1/delete", {"confirm": "yes"})
        assert refused.status_code == 403 and "not an administrator" in refused.context["message"]
        assert (await viewer.get("/settings")).status_code == 403
    assert [r.id for r in (await admin.get("/alerts")).context["rules"]] == [1, 2]
