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

Every code is a constant of app/wire/codes.py. One handler in app/api/errors.py renders them all
as {"error": {"code", "message"}}, together with the errors of app/storage and app/meta it maps.
The storage engine's exceptions reach the API through the broker, so its exception module is
passed on here (`storage`): the API layer never imports the storage engine.
"""

from __future__ import annotations

from chunkmq.storage import errors as storage
from chunkmq.storage.lock import DirectoryLocked
from chunkmq.wire import codes

__all__ = [
    "BrokerError", "DirectoryLocked", "Forbidden", "InvalidInput", "NotFound", "PreconditionFailed", "QueueFull",
    "StorageFull", "TooLarge", "Unauthorized", "Unavailable", "Unroutable", "storage",
]


class BrokerError(Exception):
    """Base class: an error a client can act on."""

    status: int = 500
    code: str = codes.INTERNAL_ERROR

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
    code = codes.INVALID_BODY


class NotFound(BrokerError):
    """Raised when an exchange, queue, group, binding or message does not exist."""

    status = 404
    code = codes.NOT_FOUND


class PreconditionFailed(BrokerError):
    """Raised on a redeclare with other properties, or a delete that would lose messages."""

    status = 409
    code = codes.PRECONDITION_FAILED


class TooLarge(BrokerError):
    """Raised when a message or a batch exceeds the configured limits."""

    status = 413
    code = codes.MESSAGE_TOO_LARGE


class Unroutable(BrokerError):
    """Raised when a mandatory publish contains a message no queue receives."""

    status = 422
    code = codes.UNROUTABLE


class QueueFull(BrokerError):
    """Raised when a queue with overflow `reject_publish` has no room for a batch."""

    status = 429
    code = codes.QUEUE_FULL


class StorageFull(BrokerError):
    """Raised when the disk is full; nothing of the request was stored."""

    status = 507
    code = codes.STORAGE_FULL


class Unauthorized(BrokerError):
    """Raised when a request has no valid token."""

    status = 401
    code = codes.UNAUTHORIZED


class Forbidden(BrokerError):
    """Raised when a token lacks the permission a request needs."""

    status = 403
    code = codes.FORBIDDEN


class Unavailable(BrokerError):
    """Raised when the broker cannot make a change durable right now (the metadata store failed)."""

    status = 503
    code = codes.UNAVAILABLE
