"""What neither the read model nor the broker's history (app/broker/history.py) keeps, sampled by the
alert engine at each evaluation, in memory:

- when a consumer of each group was last seen (`no_consumers`: the views forget idle consumers); for
  a queue without groups (group UNREAD), since when messages have waited in it,
- each queue's dead-letter counter over the last hour (`dead_letters` counts a window of it),
- since when each group's lag has not been falling (`time_to_clear`: growing or steady for a window).

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
    """Not thread-safe: the event loop owns it. Told about the queues the alert engine looks at (those
    that changed, and those due), and about the queues deleted (`forget`)."""

    def __init__(self) -> None:
        # per queue, per group: (when a consumer was last seen, whether messages waited then)
        self._consumer_seen: dict[str, dict[str, tuple[int, bool]]] = {}
        self._dead: dict[str, deque[tuple[int, int]]] = {}
        # per queue, per group with lag that is not clearing: since when (epoch ms)
        self._not_clearing: dict[str, dict[str, int]] = {}

    def observe(self, queues: Iterable[QueueView], now_ms: int) -> None:
        for q in queues:
            dead = self._dead.setdefault(q.name, deque())
            if not dead or now_ms - dead[-1][0] >= STEP_MS or dead[-1][1] != q.dead_lettered:
                dead.append((now_ms, q.dead_lettered))
            while len(dead) > 1 and now_ms - dead[1][0] > HOUR_MS:
                dead.popleft()
            before = self._consumer_seen.get(q.name, {})
            seen: dict[str, tuple[int, bool]] = {}  # the groups it has now: a deleted one is forgotten
            for g in q.groups:
                waiting = g.lag > 0
                newest = max((c.last_seen for c in g.consumers), default=None)
                previous = before.get(g.name)
                if newest is not None:
                    seen[g.name] = (newest, waiting)
                elif g.name == UNREAD and (not waiting or previous is None or not previous[1]):
                    # nobody reads it: counted from when messages began to wait (a queue that was empty
                    # changed when they came, and is looked at then)
                    seen[g.name] = (now_ms, waiting)
                else:  # never seen, or forgotten: count from the first time it had none
                    seen[g.name] = (previous[0] if previous is not None else now_ms, waiting)
            self._consumer_seen[q.name] = seen
            stuck = self._not_clearing.get(q.name, {})
            self._not_clearing[q.name] = {g.name: stuck.get(g.name, now_ms) for g in q.groups
                                          if g.lag > 0 and g.clearing in ("growing", "steady")}

    def forget(self, queue: str) -> None:
        """A queue was deleted."""
        self._consumer_seen.pop(queue, None)
        self._dead.pop(queue, None)
        self._not_clearing.pop(queue, None)

    def not_clearing_since(self, queue: str, group: str) -> int | None:
        """Since when the group's lag has been growing or standing still (None: it is not)."""
        return self._not_clearing.get(queue, {}).get(group)

    def consumer_seen_at(self, queue: str, group: str) -> int | None:
        seen = self._consumer_seen.get(queue, {}).get(group)
        return seen[0] if seen is not None else None

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
