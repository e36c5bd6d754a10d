"""Errors of the alerts API, in the broker's one error tree (app/broker/errors.py) so the one handler
in app/api/errors.py renders them as {"error": {"code", "message"}}."""

from __future__ import annotations

from chunkmq.broker.errors import BrokerError, NotFound, PreconditionFailed


class RuleNotFound(NotFound):
    """Raised when an alert rule id does not exist."""

    code = "rule_not_found"


class SmtpNotConfigured(PreconditionFailed):
    """Raised when a mail is asked for while CHUNKMQ_SMTP_HOST (or any recipient) is not set."""

    code = "smtp_not_configured"


class MailFailed(BrokerError):
    """Raised when the SMTP server could not be reached or refused a test mail."""

    status = 502
    code = "smtp_failed"
