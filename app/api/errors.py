"""One place that turns every error into API.md's shape: {"error": {"code", "message"}}.

The error map, as httpx's `map_httpcore_exceptions`: an error of a lower layer (app/storage,
app/meta, SQLAlchemy) is translated into a BrokerError with its API code and HTTP status by
`api_error`, which picks the most specific entry of ERROR_MAP along the exception's MRO. Broker
errors carry their own code and status. HTTP routes, plain ASGI routes and WebSocket streams all
go through `api_error`; tests/api/test_errors.py fails for any exception class without an entry.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import sys
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson
from starlette.types import Receive, Scope, Send

from chunkmq.alerts.errors import MailError
from chunkmq.api.deps import send_body
from chunkmq.auth.permissions import InvalidPattern
from chunkmq.broker.errors import BrokerError, DirectoryLocked, storage
from chunkmq.meta import errors as meta
from chunkmq.spark import errors as spark
from chunkmq.wire import codes

if TYPE_CHECKING:  # Starlette's requests and responses come with the full app: the hot routes need none
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.websockets import WebSocket

log = logging.getLogger("chunkmq.api")

# Lower-layer exception class -> API error code (its status comes from app/wire/codes.py).
ERROR_MAP: dict[type[BaseException], str] = {
    storage.StorageError: codes.STORAGE_ERROR,
    storage.MessageTooLarge: codes.MESSAGE_TOO_LARGE,
    storage.BatchTooLarge: codes.BATCH_TOO_LARGE,
    storage.StorageFull: codes.STORAGE_FULL,
    storage.CorruptChunk: codes.CORRUPT_CHUNK,
    storage.StoreClosed: codes.UNAVAILABLE,
    storage.UnknownQueue: codes.QUEUE_NOT_FOUND,
    storage.QueueCapReached: codes.QUEUE_FULL,
    storage.TierError: codes.UNAVAILABLE,  # the tier's bucket refused or failed a request: try again later
    DirectoryLocked: codes.UNAVAILABLE,  # raised on start only; another server owns the data directory
    meta.MetaError: codes.METADATA_ERROR,
    meta.AlreadyExists: codes.ALREADY_EXISTS,
    meta.NotFound: codes.NOT_FOUND,  # refined by the entity: queue_not_found, ...
    meta.InvalidValue: codes.INVALID_BODY,
    # The metadata's reads before the ORM is loaded (app/meta/plain.py), as the ORM's below
    sqlite3.Error: codes.METADATA_ERROR,
    sqlite3.OperationalError: codes.UNAVAILABLE,
    InvalidPattern: codes.INVALID_BODY,  # a token's permission pattern
    MailError: codes.SMTP_FAILED,
    # The Spark connector's errors, as the `chunkmq spark` jobs report them
    spark.OptionError: codes.INVALID_REQUEST,
    spark.DataLoss: codes.PRECONDITION_FAILED,  # failOnDataLoss: the offsets the query needs are gone
    spark.ReadFailed: codes.UNAVAILABLE,
    spark.ChunkmqError: codes.INTERNAL_ERROR,  # refined by the broker's own code
}

# SQLAlchemy's and FastAPI's by name: a server answers its first requests before it loads them
# (app/start.py), and until then none of their errors can be raised.
_NAMED: dict[str, str] = {
    "sqlalchemy.exc.SQLAlchemyError": codes.METADATA_ERROR,
    "sqlalchemy.exc.OperationalError": codes.UNAVAILABLE,  # database locked or gone: try again
}

_ENTITY_CODES = {
    "exchange": codes.EXCHANGE_NOT_FOUND, "queue": codes.QUEUE_NOT_FOUND, "group": codes.GROUP_NOT_FOUND,
    "binding": codes.BINDING_NOT_FOUND, "token": codes.TOKEN_NOT_FOUND, "alert rule": codes.RULE_NOT_FOUND,
}

_HTTP_CODES = {
    400: codes.INVALID_BODY, 401: codes.UNAUTHORIZED, 403: codes.FORBIDDEN, 404: codes.NOT_FOUND,
    405: codes.METHOD_NOT_ALLOWED, 413: codes.BODY_TOO_LARGE, 415: codes.UNSUPPORTED_MEDIA_TYPE,
    422: codes.INVALID_BODY, 503: codes.UNAVAILABLE,
}


class Refused(Exception):
    """A WebSocket was refused before its endpoint ran (app/api/access.py): the error frame and the
    close are sent already, nothing is left to answer."""


def code_of(exc: BaseException) -> str:
    """The API code of any exception, without logging: its own for a BrokerError, else the most
    specific ERROR_MAP entry along its MRO (internal_error when none)."""
    if isinstance(exc, BrokerError):
        return exc.code
    if _validation_error(exc):  # a JSON body's field (as a form's), else a parameter
        body = all(err.get("loc", ("",))[0] == "body" for err in exc.errors())  # type: ignore[attr-defined]
        return codes.INVALID_BODY if body else codes.INVALID_REQUEST
    if _http_exception(exc):
        return _HTTP_CODES.get(exc.status_code, codes.INTERNAL_ERROR if exc.status_code >= 500 else codes.INVALID_BODY)
    code = next((c for cls in type(exc).__mro__ if (c := _mapped(cls)) is not None), codes.INTERNAL_ERROR)
    if isinstance(exc, meta.NotFound):
        code = _ENTITY_CODES.get(exc.entity, codes.NOT_FOUND)
    elif isinstance(exc, spark.ChunkmqError) and exc.code in codes.STATUS:
        code = exc.code
    return code


def _mapped(cls: type) -> str | None:
    return ERROR_MAP.get(cls) or _NAMED.get(f"{cls.__module__}.{cls.__qualname__}")


def _validation_error(exc: BaseException) -> bool:
    """Whether `exc` is FastAPI's RequestValidationError (none can exist before FastAPI is loaded)."""
    fastapi_exceptions = sys.modules.get("fastapi.exceptions")
    return fastapi_exceptions is not None and isinstance(exc, fastapi_exceptions.RequestValidationError)


def _http_exception(exc: BaseException) -> TypeGuard[StarletteHTTPException]:
    """Whether `exc` is Starlette's HTTPException (none can exist before Starlette's exceptions are loaded)."""
    exceptions = sys.modules.get("starlette.exceptions")
    return exceptions is not None and isinstance(exc, exceptions.HTTPException)


def status_of(exc: BaseException) -> int:
    """The HTTP status the API answers `exc` with, without logging."""
    if isinstance(exc, BrokerError):
        return exc.status
    return exc.status_code if _http_exception(exc) else codes.STATUS[code_of(exc)]


def server_fault(exc: BaseException) -> bool:
    """Whether `exc` is the server's own failure, whose message the API does not send (it may name
    files, database or driver details): a 5xx but 507 that is not a BrokerError."""
    if isinstance(exc, BrokerError) or _http_exception(exc):
        return False
    status = status_of(exc)
    return status >= 500 and status != 507


def api_error(exc: BaseException) -> BrokerError:
    """The API error for any exception (the one map of every presenter: REST, WebSocket, console,
    CLI): itself for a BrokerError, else a BrokerError with `code_of(exc)`. Server-side failures
    (5xx but 507) are logged here with their stack trace, and their message is not sent: it may name
    files, database or driver details."""
    if isinstance(exc, BrokerError):
        return exc
    code, status = code_of(exc), status_of(exc)
    if _http_exception(exc):  # raised by this server's own code: its words
        message = str(exc.detail)
    elif server_fault(exc):
        log.error("request failed: %r", exc, exc_info=exc)
        message = f"{code.replace('_', ' ')}; see the server log"
    elif _validation_error(exc):
        message = _describe(exc)  # type: ignore[arg-type]
    else:
        message = getattr(exc, "message", None) or str(exc) or code.replace("_", " ")
    error = BrokerError(message, code=code)
    error.status = status
    return error


def error_body(code: str, message: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message}})


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import Response

    return Response(error_body(code, message), status_code=status, media_type="application/json", headers=headers)


async def send_error(send: Send, status: int, code: str, message: str,
                     extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """An error answer straight through ASGI, for code that answers outside the exception handlers
    (the hot routes, the local-only guard, the overload answer)."""
    headers = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    await send_body(send, error_body(code, message), "application/json", [*headers, *extra], status=status)


async def overloaded(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer past CHUNKMQ_MAX_CONNECTIONS, in place of uvicorn's plain-text 503 (app/http/protocol.py):
    sent before the request is read, so the connection closes after it."""
    await send_error(send, 503, codes.OVERLOADED,
                     "the server has as many open connections as CHUNKMQ_MAX_CONNECTIONS allows; try again shortly",
                     ((b"retry-after", b"1"), (b"connection", b"close")))


def error_frame(exc: BrokerError, seq: Any = ...) -> bytes:
    frame: dict[str, Any] = {"type": "error", "error": {"code": exc.code, "message": exc.message}}
    if seq is not ...:
        frame["seq"] = seq
    return orjson.dumps(frame)


async def send_frame(websocket: WebSocket, frame: bytes, text: bool) -> None:
    """One frame: binary, or with `text` a text frame (a JSON frame of a format=binary stream, whose
    binary frames are batches)."""
    if text:
        await websocket.send_text(frame.decode())
    else:
        await websocket.send_bytes(frame)


async def refuse(websocket: WebSocket, exc: BrokerError, text: bool = False) -> None:
    """The stream cannot open or go on: the error frame, then close with 4000 + HTTP status."""
    with contextlib.suppress(Exception):  # the peer may be gone already
        await send_frame(websocket, error_frame(exc), text)
        await websocket.close(4000 + exc.status, exc.code)


def render(exc: BaseException) -> Response:
    error = api_error(exc)
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return error_response(error.status, error.code, error.message, headers)


def _describe(exc: RequestValidationError) -> str:
    """A readable sentence from pydantic's error list: 'query.limit: must be <= 1000; ...'."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def install(app: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError
    from sqlalchemy.exc import SQLAlchemyError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from chunkmq.api.allow import allow_header, bad_name

    async def mapped(_: Request, exc: Exception) -> Response:
        return render(exc)

    for cls in (BrokerError, *ERROR_MAP, SQLAlchemyError):
        app.add_exception_handler(cls, mapped)

    @app.exception_handler(Refused)
    async def refused(_: WebSocket, exc: Refused) -> None:
        return None

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return render(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404 and "route" not in request.scope:  # no route: a name that is not one?
            bad = bad_name(request.scope.get("raw_path", b"").decode("latin-1") or request.url.path)
            if bad is not None:
                return render(bad)
        error = api_error(exc)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette's names one route's methods; a path may have several
            headers = {**(headers or {}), "Allow": allow_header(request)}
        return error_response(error.status, error.code, error.message, headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, codes.INTERNAL_ERROR, "internal error; see the server log")
