"""Pausing a consumer group: the pause body, and the one timer that ends timed pauses.

A paused group delivers nothing (Consuming.deliver asks Group.is_paused) while its consumers stay
attached. A timed pause ends at its `until_ms` (epoch ms): whoever delivers first after that time
sees it ended, and `PauseTimers.due`, called every sweep, ends it for the consumers that wait, so
they are woken. One heap for every group, not a task per paused group.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.fields import MAX_INT, reject_unknown
from chunkmq.broker.group import Group

__all__ = ["PauseTimers", "parse_pause"]


def parse_pause(body: Mapping[str, Any], now_ms: int) -> int | None:
    """The body of POST .../pause: `{"until_ms": <epoch ms, in the future>}` or `{}` (until resumed)."""
    reject_unknown(body, ("until_ms",))
    until = body.get("until_ms")
    if until is None:
        return None
    if type(until) is not int or not now_ms < until <= MAX_INT:
        raise InvalidInput("until_ms must be an integer: a time in the future, in epoch milliseconds")
    return until


@dataclass(slots=True)
class PauseTimers:
    """Timed pauses by the time they end. A group resumed or paused again meanwhile leaves a stale
    entry, dropped when it comes up."""

    _heap: list[tuple[int, int, Group]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, group: Group) -> None:
        if group.paused and group.paused_until_ms is not None:
            heapq.heappush(self._heap, (group.paused_until_ms, next(self._seq), group))

    def due(self, now_ms: int) -> list[Group]:
        """The groups whose timed pause ended by `now_ms`, now resumed: their waiting consumers are
        to be woken (also when a delivery saw the pause end first, or it was resumed meanwhile: one
        wake-up too many is harmless)."""
        ended: list[Group] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            until, _, group = heapq.heappop(heap)
            if group.closed or (group.paused and group.paused_until_ms != until):
                continue  # deleted, or paused again since
            group.resume()
            ended.append(group)
        return ended

    def __len__(self) -> int:
        return len(self._heap)
