"""app/alerts/mail.py: alert mails composed (subject, text and HTML, trend, links) and sent to a real
SMTP server (aiosmtpd, tests/mailbox.py); every failure of the send is one MailError with the answer."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

import pytest

from chunkmq.alerts.errors import MailError
from chunkmq.alerts.mail import TREND_BUCKETS, Notification, buckets, compose, send, sparkline
from chunkmq.alerts.rules import Observation
from chunkmq.alerts.state import Notice
from chunkmq.config import Settings
from chunkmq.meta.alerts import AlertRuleRow
from tests.mailbox import Mailbox
from tests.server import free_port

NOW = 1_900_000_000_000
STEP = 3_600_000 // TREND_BUCKETS
T = datetime(2026, 1, 1, tzinfo=UTC)


def _rule(kind: str = "lag_messages", threshold: float = 100, id_: int = 7) -> AlertRuleRow:
    return AlertRuleRow(id_, kind, "*", "*", threshold, 0, 3600, 300, (), True, T, T)


def _note(notice: Notice = Notice.FIRING, queue: str = "orders", group: str = "billing", **kw: Any) -> Notification:
    obs = Observation(queue, group, 1500, lag=1500, lag_seconds=42.25, consumers=0)
    return Notification(notice, kw.pop("rule", _rule()), obs, NOW, **kw)


def _settings(port: int = 25, **kw: Any) -> Settings:
    values: dict[str, Any] = {"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_timeout_seconds": 2,
                              "console_url": "http://console.test/"}
    return Settings(**{**values, **kw})


def _text(msg: EmailMessage, subtype: str) -> str:
    body = msg.get_body(preferencelist=(subtype,))
    assert body is not None
    return str(body.get_content())  # type: ignore[attr-defined]


def test_sparkline_spans_its_values_from_lowest_to_highest() -> None:
    assert sparkline([]) == ""
    assert sparkline([5, 5, 5]) == "▁▁▁"  # no span: all at the bottom, no division by zero
    assert sparkline([0, 50, 100]) == "▁▅█"


def test_buckets_keep_the_highest_lag_of_each_five_minutes_of_the_last_hour() -> None:
    trend = [(NOW, 3, 0.0), (NOW - 10, 9, 0.0), (NOW - STEP, 4, 0.0), (NOW - 3_600_000, 99, 0.0),
             (NOW - (TREND_BUCKETS - 1) * STEP, 1, 0.0)]
    out = buckets(trend, NOW)
    assert len(out) == TREND_BUCKETS
    assert out[-1] == 9 and out[-2] == 4 and out[0] == 1  # the sample an hour old is outside
    assert out[1:-2] == [None] * (TREND_BUCKETS - 3)


def test_one_alert_is_one_subject_with_its_numbers_and_a_link_to_its_queue() -> None:
    trend = tuple((NOW - i * STEP, 100 * (12 - i), 0.0) for i in range(12))
    msg = compose([_note(trend=trend, fired_at_ms=NOW - 60_000)], _settings(), ["a@x.org", "b@x.org"])
    assert msg["Subject"] == ("[chunkmq] FIRING lag_messages orders/billing: "
                              "group lag: 1,500 messages, threshold 100 messages")
    assert (msg["To"], msg["From"]) == ("a@x.org, b@x.org", "chunkmq@localhost")
    text = _text(msg, "plain")
    assert "queue: orders   group: billing" in text
    assert "lag: 1,500 messages, oldest unacked 42.2 s, consumers online: 0" in text
    assert "firing since: 2030-03-17 17:45:40 UTC" in text
    spark = text.split("lag over the last hour: ", 1)[1].split()[0]
    assert len(spark) == TREND_BUCKETS and spark[0] == "▁" and spark[-1] == "█" and list(spark) == sorted(spark)
    assert "(100 → 200 → 300" in text and "→ 1,200)" in text
    assert "http://console.test/queues/orders" in text and "All alerts: http://console.test/alerts" in text


def test_resolved_says_back_under_and_a_digest_counts_each_kind_of_notice() -> None:
    resolved = compose([_note(Notice.RESOLVED)], _settings(), ["a@x.org"])
    assert str(resolved["Subject"]).endswith("group lag: 1,500 messages, back under 100 messages")
    digest = compose([_note(), _note(queue="q2"), _note(Notice.RESOLVED, queue="q3"),
                      _note(Notice.REMINDER, rule=_rule("disk", 90), queue="", group="")], _settings(), ["a@x.org"])
    assert digest["Subject"] == "[chunkmq] 4 alerts: 2 firing, 1 resolved, 1 reminder"
    text = _text(digest, "plain")
    assert "REMINDER disk broker" in text and "http://console.test/storage" in text  # no queue: the storage page


def test_a_queue_without_a_group_says_so_and_names_are_escaped_and_quoted() -> None:
    msg = compose([_note(queue="<b>q a", group="")], _settings(), ["a@x.org"])
    assert "lag_messages <b>q a (no consumer group)" in str(msg["Subject"])
    html = _text(msg, "html")
    assert "<b>q a" not in html and "&lt;b&gt;q a" in html
    assert 'href="http://console.test/queues/%3Cb%3Eq%20a"' in html


def test_an_alert_on_a_paused_group_says_it_is_paused_not_stalled() -> None:
    paused = Observation("orders", "billing", 900, lag=1500, lag_seconds=900, consumers=1, paused=True)
    msg = compose([Notification(Notice.FIRING, _rule("stalled", 600), paused, NOW)], _settings(), ["a@x.org"])
    assert msg["Subject"] == ("[chunkmq] FIRING stalled orders/billing (paused): group paused, not stalled: "
                              "ack floor not moving: 900 s, threshold 600 s")
    assert "group paused, not stalled" in _text(msg, "html")
    running = compose([_note(rule=_rule("stalled", 600))], _settings(), ["a@x.org"])
    assert "paused" not in str(running["Subject"])


def test_send_delivers_to_every_recipient_and_returns_the_servers_answer(mailbox: Mailbox) -> None:
    msg = compose([_note()], _settings(mailbox.port), ["a@x.org", "b@x.org"])
    assert asyncio.run(send(msg, _settings(mailbox.port))) == "250 2.0.0 queued"
    [got] = mailbox.received
    assert got.recipients == ["a@x.org", "b@x.org"] and got.subject == msg["Subject"]
    assert "\n " not in str(got.message["Subject"])  # one line, not folded after "Subject:"


def test_a_refusal_is_a_mail_error_with_the_servers_answer(mailbox: Mailbox) -> None:
    mailbox.refuse_next(1)
    with pytest.raises(MailError) as refused:
        asyncio.run(send(compose([_note()], _settings(), ["a@x.org"]), _settings(mailbox.port)))
    assert refused.value.answer == "451 4.3.0 mailbox busy, try again later"
    assert mailbox.received == []


def test_nobody_listening_and_a_server_that_never_answers_are_mail_errors() -> None:
    with pytest.raises(MailError, match="SMTPConnectError"):
        asyncio.run(send(compose([_note()], _settings(), ["a@x.org"]), _settings(free_port())))
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        settings = _settings(silent.getsockname()[1], smtp_timeout_seconds=0.2)
        with pytest.raises(MailError, match="Timeout"):
            asyncio.run(send(compose([_note()], settings, ["a@x.org"]), settings))


def test_login_with_the_configured_user_and_password() -> None:
    box = Mailbox(login=("alerts", "s3cret"))
    box.controller.start()
    try:
        good = _settings(box.port, smtp_user="alerts", smtp_password="s3cret")
        assert asyncio.run(send(compose([_note()], good, ["a@x.org"]), good)).startswith("250")
        assert box.logins == ["alerts"]
        bad = _settings(box.port, smtp_user="alerts", smtp_password="wrong", smtp_timeout_seconds=0.5)
        with pytest.raises(MailError):
            asyncio.run(send(compose([_note()], bad, ["a@x.org"]), bad))
        assert len(box.received) == 1
    finally:
        box.controller.stop()
