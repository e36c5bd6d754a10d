"""Errors of the alerts API, in the broker's one error tree (app/broker/errors.py) so the one handler
in app/api/errors.py renders them as {"error": {"code", "message"}}."""

from __future__ import annotations

from chunkmq.broker.errors import BrokerError, NotFound, PreconditionFailed
from chunkmq.wire import codes


class RuleNotFound(NotFound):
    """Raised when an alert rule id does not exist."""

    code = codes.RULE_NOT_FOUND


class SmtpNotConfigured(PreconditionFailed):
    """Raised when a mail is asked for while CHUNKMQ_SMTP_HOST (or any recipient) is not set."""

    code = codes.SMTP_NOT_CONFIGURED


class MailFailed(BrokerError):
    """Raised when the SMTP server could not be reached or refused a test mail."""

    status = 502
    code = codes.SMTP_FAILED


class MailError(Exception):
    """Raised when the SMTP server cannot be reached or refuses the mail; `answer` says what it said."""

    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.answer = answer
