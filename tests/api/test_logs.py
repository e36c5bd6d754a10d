"""The server's request log lines (app/api/logs.py): tokens redacted, the access log flushed in batches."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from chunkmq.api import logs


@pytest.fixture
def access() -> Iterator[tuple[logging.Logger, io.BytesIO]]:
    """uvicorn's access logger as uvicorn configures it (a StreamHandler), over a buffered stream."""
    logger = logging.getLogger("uvicorn.access")
    saved = (logger.handlers[:], logger.filters[:], logger.level, logger.propagate)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, raw
    finally:
        logger.handlers, logger.filters, level, logger.propagate = saved
        logger.setLevel(level)


def test_access_lines_reach_the_file_at_the_periodic_flush_not_per_line(
        access: tuple[logging.Logger, io.BytesIO]) -> None:
    logger, raw = access
    def streams() -> list[type]:  # pytest's own capture handlers aside
        return [type(h) for h in logger.handlers if isinstance(h, logging.StreamHandler) and h.stream is not None
                and type(h).__module__ != "_pytest.logging"]

    logs.install()
    assert streams() == [logs.Batched]
    logs.install()  # installing twice keeps one handler
    assert streams() == [logs.Batched]
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/api/v1/queues/q/publish?token=s3cret",
                "1.1", 200)
    assert raw.getvalue() == b""  # held in the stream's buffer: no write per request
    logs.flush()
    line = raw.getvalue().decode()
    assert "/api/v1/queues/q/publish?token=[redacted]" in line and "s3cret" not in line
