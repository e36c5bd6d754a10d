"""The access log of the hot routes (publish, pull: app/api/hot_routes.py), whose answers the HTTP
protocol (app/http/protocol.py) writes without uvicorn's request cycle.

Every hot answer is counted per route and status in `ANSWERED`, which /metrics serves as
`chunkmq_hot_requests_total{route,status}` (app/metrics.py). With CHUNKMQ_ACCESS_LOG=notable (the
default) uvicorn's access logger gets a line only for an error (status 400 or more) or a slow answer
(CHUNKMQ_ACCESS_LOG_SLOW_SECONDS after the request's headers, a long poll's wait included); with
`all`, for every answer. A line through `logging` (its record, uvicorn's formatter, the token
filter) costs 40-55 us, as much as the rest of a one-message publish; a count costs a dict update.
Every other request keeps uvicorn's line: they are not the hot path, and they are the operator's
record of who declared, deleted and read what.
"""

from __future__ import annotations

import math

#: (route path, status) -> answers since the server started; one event loop updates and reads it
ANSWERED: dict[tuple[str, int], int] = {}


class HotAccessLog:
    """Which hot answers get an access-log line (`answered`); every answer is counted."""

    __slots__ = ("every", "slow_seconds")

    def __init__(self, every: bool = True, slow_seconds: float = math.inf) -> None:
        self.every = every
        self.slow_seconds = slow_seconds

    @classmethod
    def of(cls, mode: str, slow_seconds: float) -> HotAccessLog:
        """From the settings CHUNKMQ_ACCESS_LOG (`all` or `notable`) and CHUNKMQ_ACCESS_LOG_SLOW_SECONDS."""
        return cls(mode == "all", slow_seconds)

    def answered(self, route: str, status: int, seconds: float) -> bool:
        """Count an answer of `route` that took `seconds`; whether it gets a line."""
        key = (route, status)
        ANSWERED[key] = ANSWERED.get(key, 0) + 1
        return self.every or status >= 400 or seconds >= self.slow_seconds
