"""The server's request log lines: secrets out of them (a `?token=` query parameter, from WebSocket
clients that cannot set headers, would otherwise be written in full by uvicorn's access and WebSocket
lines), and the access log written in batches rather than with one write per request."""

from __future__ import annotations

import logging
import re

_TOKEN = re.compile(r"((?:^|[?&])(?:access_)?token=)[^&\s\"]*", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    return _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


class RedactTokens(logging.Filter):
    """Rewrites the string arguments of a record (uvicorn's formatters read them one by one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) and "token=" in a.lower() else a for a in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = redact(record.msg)
        return True


class Batched(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose lines reach the stream's buffer at once and the file every FLUSH_SECONDS
    (`flush`, from the app's background tasks) or when the buffer fills: a flush per line was a
    write(2) per request, on the one thread that serves them all."""

    def flush(self) -> None:  # called by emit() after every line: the periodic flush_now() does it
        pass

    def flush_now(self) -> None:
        super().flush()


FLUSH_SECONDS = 1.0


def install() -> None:
    """On every logger that writes request lines: uvicorn's access log and its WebSocket lines."""
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
    access = logging.getLogger("uvicorn.access")
    for i, handler in enumerate(access.handlers):
        if type(handler) is logging.StreamHandler:  # uvicorn's own: one line per request
            batched = Batched(handler.stream)
            batched.setLevel(handler.level)
            batched.setFormatter(handler.formatter)
            for f in handler.filters:
                batched.addFilter(f)
            access.handlers[i] = batched


def flush() -> None:
    """Write out the access log lines held since the last flush."""
    for handler in logging.getLogger("uvicorn.access").handlers:
        if isinstance(handler, Batched):
            handler.flush_now()
