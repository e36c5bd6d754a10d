"""The hot routes' access log (app/http/access_log.py) on a real server: by default a publish's or
pull's quick success is counted on /metrics and not logged; errors, slow answers and every other
request get uvicorn's line; CHUNKMQ_ACCESS_LOG=all logs every answer."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chunkmq.config import Settings
from chunkmq.http.access_log import HotAccessLog
from tests.http.test_protocol import OK, exchange, raw, servers

PUBLISH = "/api/v1/queues/{name}/publish"
JSON = {"content-type": "application/json"}


@contextmanager
def access_lines() -> Iterator[list[str]]:
    """The access log's messages while the block runs."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.access")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def counted(metrics: bytes, route: str, status: int) -> float:
    found = re.search(rb'chunkmq_hot_requests_total\{route="%s",status="%d"\} (\S+)' % (route.encode(), status),
                      metrics)
    return float(found.group(1)) if found else 0.0


async def metrics_of(port: int) -> bytes:
    answer = await exchange(port, raw(port, ("GET", "/metrics", b"", {})))
    return answer[0]


def test_by_default_quick_successes_are_counted_and_errors_and_other_requests_logged(tmp_path: Path) -> None:
    async def main() -> None:
        async with servers(Settings(auth="off", data_dir=tmp_path / "data", log_level="info")) as (_, hot, _):
            with access_lines() as lines:
                await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", JSON)))
                assert len(lines) == 1 and '"PUT /api/v1/queues/q HTTP/1.1" 201' in lines[0]
                before = await metrics_of(hot)
                lines.clear()
                for _ in range(3):
                    [answer] = await exchange(hot, raw(hot, OK[0]))
                    assert answer.startswith(b"HTTP/1.1 200 OK")
                assert lines == []  # quick successes: no line
                [missing] = await exchange(hot, raw(hot, ("POST", "/api/v1/queues/nope/publish", OK[0][2], JSON)))
                assert missing.startswith(b"HTTP/1.1 404 ")
                assert len(lines) == 1 and '"POST /api/v1/queues/nope/publish HTTP/1.1" 404' in lines[0]
                after = await metrics_of(hot)
            assert counted(after, PUBLISH, 200) - counted(before, PUBLISH, 200) == 3
            assert counted(after, PUBLISH, 404) - counted(before, PUBLISH, 404) == 1

    asyncio.run(main())


@pytest.mark.parametrize("options", [{"access_log": "all"}, {"access_log_slow_seconds": 0.0}])
def test_every_answer_is_logged_when_asked_or_slower_than_the_limit(tmp_path: Path,
                                                                   options: dict[str, object]) -> None:
    async def main() -> None:
        settings = Settings(auth="off", data_dir=tmp_path / "data", log_level="info", **options)  # type: ignore[arg-type]
        async with servers(settings) as (_, hot, _):
            await exchange(hot, raw(hot, ("PUT", "/api/v1/queues/q", b"{}", JSON)))
            with access_lines() as lines:
                await exchange(hot, raw(hot, OK[0]))
            assert len(lines) == 1 and '"POST /api/v1/queues/q/publish HTTP/1.1" 200' in lines[0]

    asyncio.run(main())


def test_the_choice_of_a_line() -> None:
    notable = HotAccessLog.of("notable", 1.0)
    assert not notable.answered(PUBLISH, 200, 0.5)
    assert notable.answered(PUBLISH, 200, 1.0)  # slow
    assert notable.answered(PUBLISH, 400, 0.0)  # an error
    assert HotAccessLog.of("all", 1.0).answered(PUBLISH, 200, 0.0)


def test_an_unknown_mode_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="access_log"):
        Settings(access_log="some")  # type: ignore[arg-type]
