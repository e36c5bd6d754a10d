"""Errors the broker raises; each carries the API.md error code and HTTP status.

    BrokerError
    ├── InvalidInput            400 invalid_name, invalid_body, ...
    ├── NotFound                404 exchange_not_found, queue_not_found, group_not_found, message_not_found
    ├── PreconditionFailed      409 precondition_failed
    ├── TooLarge                413 message_too_large, batch_too_large
    ├── Unroutable              422 unroutable
    ├── QueueFull               429 queue_full
    ├── StorageFull             507 storage_full
    └── Unavailable             503 unavailable

One handler in app/api/errors.py renders them all as {"error": {"code", "message"}}.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base class: an error a client can act on."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidInput(BrokerError):
    """Raised when a name, size or shape in a request is not acceptable."""

    status = 400
    code = "invalid_body"


class NotFound(BrokerError):
    """Raised when an exchange, queue, group, binding or message does not exist."""

    status = 404
    code = "not_found"


class PreconditionFailed(BrokerError):
    """Raised on a redeclare with other properties, or a delete that would lose messages."""

    status = 409
    code = "precondition_failed"


class TooLarge(BrokerError):
    """Raised when a message or a batch exceeds the configured limits."""

    status = 413
    code = "message_too_large"


class Unroutable(BrokerError):
    """Raised when a mandatory publish contains a message no queue receives."""

    status = 422
    code = "unroutable"


class QueueFull(BrokerError):
    """Raised when a queue with overflow `reject_publish` has no room for a batch."""

    status = 429
    code = "queue_full"


class StorageFull(BrokerError):
    """Raised when the disk is full; nothing of the request was stored."""

    status = 507
    code = "storage_full"


class Unauthorized(BrokerError):
    """Raised when a request has no valid token."""

    status = 401
    code = "unauthorized"


class Forbidden(BrokerError):
    """Raised when a token lacks the permission a request needs."""

    status = 403
    code = "forbidden"


class Unavailable(BrokerError):
    """Raised when the broker cannot make a change durable right now (the metadata store failed)."""

    status = 503
    code = "unavailable"
