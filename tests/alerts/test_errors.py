"""The alerts API's errors (app/alerts/errors.py): in the broker's tree with codes of the one table,
and MailError (what mail.send raises) keeping the SMTP server's answer."""

from __future__ import annotations

from chunkmq.alerts import errors, mail
from chunkmq.api.errors import api_error
from chunkmq.broker.errors import BrokerError
from chunkmq.wire import codes


def test_codes_and_statuses_come_from_the_table() -> None:
    for cls, code in ((errors.RuleNotFound, codes.RULE_NOT_FOUND),
                      (errors.SmtpNotConfigured, codes.SMTP_NOT_CONFIGURED),
                      (errors.MailFailed, codes.SMTP_FAILED)):
        assert issubclass(cls, BrokerError) and cls.code == code and cls.status == codes.STATUS[code]


def test_mail_error_keeps_the_answer_and_maps_to_smtp_failed() -> None:
    assert mail.MailError is errors.MailError
    error = errors.MailError("451 4.3.0 mailbox busy")
    assert error.answer == "451 4.3.0 mailbox busy"
    mapped = api_error(error)
    assert (mapped.code, mapped.status) == (codes.SMTP_FAILED, 502)
    assert "451" not in mapped.message  # escaped only through MailFailed, whose message says what happened
