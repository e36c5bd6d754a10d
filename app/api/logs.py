"""Secrets out of the server's log lines: a `?token=` query parameter (WebSocket clients that cannot
set headers) would otherwise be written in full by uvicorn's access and WebSocket log lines."""

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


def install() -> None:
    """On every logger that writes request lines: uvicorn's access log and its WebSocket lines."""
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
