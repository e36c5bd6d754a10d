"""Counters and per-second rates for the overview page and /api/v1/overview."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

_WINDOW = 5  # seconds of samples behind a rate


@dataclass(slots=True)
class Rate:
    """A monotonically increasing count and its rate over the last few seconds."""

    total: int = 0
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_WINDOW + 1))

    def add(self, n: int) -> None:
        self.total += n

    def sample(self, now: float | None = None) -> None:
        self._samples.append((time.monotonic() if now is None else now, self.total))

    @property
    def per_second(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass(slots=True)
class BrokerStats:
    published: Rate = field(default_factory=Rate)
    delivered: Rate = field(default_factory=Rate)
    acked: Rate = field(default_factory=Rate)
    dead_lettered: int = 0
    dropped: int = 0
    expired: int = 0
    retention_freed_bytes: int = 0
    retention_deleted_chunks: int = 0
    started: float = field(default_factory=time.time)

    def sample(self) -> None:
        now = time.monotonic()
        for rate in (self.published, self.delivered, self.acked):
            rate.sample(now)
