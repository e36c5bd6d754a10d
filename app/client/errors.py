"""Errors the client raises; each API error carries the API.md error code.

    ChunkmqError                 every error of this library
    ├── ApiError                 the server answered {"error": {"code", "message"}}: .code, .status, .message
    │   ├── InvalidRequest       400 invalid_name, invalid_body, ...
    │   ├── Unauthorized         401 unauthorized
    │   ├── Forbidden            403 forbidden
    │   ├── NotFound             404 exchange_not_found, queue_not_found, group_not_found, ...
    │   ├── PreconditionFailed   409 precondition_failed
    │   ├── TooLarge             413 message_too_large, batch_too_large
    │   ├── Unroutable           422 unroutable
    │   ├── QueueFull            429 queue_full
    │   ├── Unavailable          503 unavailable, overloaded
    │   └── StorageFull          507 storage_full
    └── ConnectionFailed         no answer: refused, reset, timed out, or a stream lost past its retry budget

`retryable` is True for QueueFull, Unavailable, StorageFull and ConnectionFailed: the same request
may succeed later, unchanged. The others need another request (or another token).
"""

from __future__ import annotations

from typing import Any

from chunkmq.wire import codes


class ChunkmqError(Exception):
    """Base class of every error this library raises."""

    retryable: bool = False  # the same request may succeed later (after a backoff)


class ApiError(ChunkmqError):
    """Raised when the server refuses a request; `code` is the API.md error code."""

    status: int = 0

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        if status is not None:
            self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles its args (the one formatted string): a copy made in another process (a
        # multiprocessing pool's worker) needs the constructor's arguments instead.
        return type(self), (self.code, self.message, self.status), self.__dict__


class InvalidRequest(ApiError):
    """Raised when a name, size or shape in the request is not acceptable (400)."""

    status = 400


class Unauthorized(ApiError):
    """Raised when the token is missing or not valid (401)."""

    status = 401


class Forbidden(ApiError):
    """Raised when the token lacks the permission the request needs (403)."""

    status = 403


class NotFound(ApiError):
    """Raised when an exchange, queue, group, binding or message does not exist (404)."""

    status = 404


class PreconditionFailed(ApiError):
    """Raised on a redeclare with other properties or a delete that would lose messages (409)."""

    status = 409


class TooLarge(ApiError):
    """Raised when a message or batch exceeds the server's limits (413)."""

    status = 413


class Unroutable(ApiError):
    """Raised when a mandatory publish holds a message no queue receives (422)."""

    status = 422


class QueueFull(ApiError):
    """Raised when a queue with overflow reject_publish has no room (429)."""

    status = 429
    retryable = True


class Unavailable(ApiError):
    """Raised when the server is shutting down, busy, or past its connection limit (503)."""

    status = 503
    retryable = True


class StorageFull(ApiError):
    """Raised when the server's disk is full (507)."""

    status = 507
    retryable = True


class ConnectionFailed(ChunkmqError):
    """Raised when the server cannot be reached, or a stream could not reconnect in time."""

    retryable = True


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (InvalidRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed, TooLarge, Unroutable,
                QueueFull, Unavailable, StorageFull)
}
_BY_CODE: dict[str, int] = codes.STATUS  # the server's own table: a stream error frame has no status


def api_error(code: str, message: str, status: int | None = None) -> ApiError:
    """The typed error for an API error; the status comes from the code when not known (streams)."""
    if status is None:
        status = _BY_CODE.get(code, 0)
    return _BY_STATUS.get(status, ApiError)(code, message, status)


def from_body(status: int, body: Any) -> ApiError:
    """The typed error for an HTTP error response (its JSON body, or whatever came instead)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return api_error(error["code"], str(error.get("message", "")), status)
    return api_error("error", f"HTTP {status}: {str(body)[:200]}", status)
