"""What neither the read model nor the broker's history (app/broker/history.py) keeps, sampled by the
alert engine at each evaluation, in memory:

- when a consumer of each group was last seen (`no_consumers`: the views forget idle consumers); for
  a queue without groups (group UNREAD), since when messages have waited in it,
- each queue's dead-letter counter over the last hour (`dead_letters` counts a window of it).

The lag trend in mails and the ack floor movements for `stalled` come from the broker's history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from chunkmq.broker.views import QueueView

HOUR_MS = 3_600_000
UNREAD = ""  # the group a queue without consumer groups is watched as (rules.unread)
STEP_MS = 10_000  # at least one dead-letter sample per queue every 10 s


class Watch:
    """Not thread-safe: the event loop owns it."""

    def __init__(self) -> None:
        self._consumer_seen: dict[tuple[str, str], int] = {}
        self._dead: dict[str, deque[tuple[int, int]]] = {}

    def observe(self, queues: Iterable[QueueView], now_ms: int) -> None:
        groups: set[tuple[str, str]] = set()
        names: set[str] = set()
        for q in queues:
            names.add(q.name)
            dead = self._dead.setdefault(q.name, deque())
            if not dead or now_ms - dead[-1][0] >= STEP_MS or dead[-1][1] != q.dead_lettered:
                dead.append((now_ms, q.dead_lettered))
            while len(dead) > 1 and now_ms - dead[1][0] > HOUR_MS:
                dead.popleft()
            for g in q.groups:
                key = (q.name, g.name)
                groups.add(key)
                newest = max((c.last_seen for c in g.consumers), default=None)
                if newest is not None:
                    self._consumer_seen[key] = newest
                elif g.name == UNREAD and g.lag <= 0:  # nobody reads it, but nothing waits yet
                    self._consumer_seen[key] = now_ms
                else:  # never seen, or forgotten: count from the first time it had none
                    self._consumer_seen.setdefault(key, now_ms)
        for key in self._consumer_seen.keys() - groups:
            del self._consumer_seen[key]
        for name in self._dead.keys() - names:
            del self._dead[name]

    def consumer_seen_at(self, queue: str, group: str) -> int | None:
        return self._consumer_seen.get((queue, group))

    def dead_lettered_since(self, queue: str, since_ms: int) -> int:
        """Messages the queue dead-lettered since `since_ms` (as far back as the samples go)."""
        samples = self._dead.get(queue)
        if not samples:
            return 0
        base = samples[0][1]
        for at, count in samples:
            if at > since_ms:
                break
            base = count
        return samples[-1][1] - base
