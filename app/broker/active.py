"""Single active consumer: of the consumers attached to a group, one receives its messages at a time.

A consumer is attached while it holds a stream (WebSocket or server-sent events) or a long poll
open on the group, and, once its last pull ended, for a lease (the WebSocket ping timeout) in
which its next pull keeps its place. Attached consumers queue up in order of arrival; the active
one stays active while attached, and when it goes the one that arrived next takes over. A
consumer that leaves and comes back queues up again at the end.

The group (app/broker/group.py) owns one of these; the broker asks `choose` before it delivers to
a single-active-consumer group and hands the in-flight messages of a consumer that lost its place
to the next one (Consuming._may_receive). Owned by the event loop thread: no locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ActiveConsumers"]


@dataclass(slots=True)
class ActiveConsumers:
    active: str | None = None
    # consumer -> open streams and waiting polls; the dict's order is the order of arrival
    _open: dict[str, int] = field(default_factory=dict)
    _leases: dict[str, int] = field(default_factory=dict)  # consumer -> monotonic ms its pull lease ends

    def attach(self, consumer: str) -> None:
        """A stream or a long poll of `consumer` opened."""
        self._open[consumer] = self._open.get(consumer, 0) + 1  # back within its lease: same place

    def detach(self, consumer: str, lease_until: int | None = None) -> None:
        """A stream or long poll of `consumer` ended; with `lease_until` (a pull) it stays attached
        until then."""
        count = self._open.get(consumer, 0) - 1
        if count > 0:
            self._open[consumer] = count
        elif lease_until is not None:
            self._open[consumer] = 0  # keeps its place while the lease lasts
            self._leases[consumer] = lease_until
        else:
            self._open.pop(consumer, None)
            self._leases.pop(consumer, None)

    def touch(self, consumer: str, lease_until: int) -> None:
        """A pull of `consumer` (attached, then detached with a lease, in one call)."""
        self._open.setdefault(consumer, 0)
        self._leases[consumer] = max(lease_until, self._leases.get(consumer, 0))

    def attached(self, now: int) -> list[str]:
        """The consumers attached at monotonic ms `now`, in order of arrival (the first is active)."""
        return [c for c, n in self._open.items() if n > 0 or self._leases.get(c, 0) > now]

    def choose(self, now: int) -> str | None:
        """Forget consumers whose lease ended and choose the active one. Returns the consumer that
        was active and is gone (its in-flight messages go to the next one), else None."""
        gone = [c for c, n in self._open.items() if n <= 0 and self._leases.get(c, 0) <= now]
        for consumer in gone:
            del self._open[consumer]
            self._leases.pop(consumer, None)
        previous = self.active
        if previous is not None and previous in self._open:
            return None
        self.active = next(iter(self._open), None)
        return previous
