"""Views shared by every open console tab for a moment.

Ten tabs polling the overview every two seconds would build the same views five times a second;
with this each is built at most once per `ttl`, so an open console costs the broker little however
many tabs show it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class Snapshots:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._built: dict[str, tuple[float, Any]] = {}

    def get(self, key: str, build: Callable[[], Any]) -> Any:
        now = time.monotonic()
        hit = self._built.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        value = build()
        self._built[key] = (now, value)
        return value

    def clear(self) -> None:
        """After an action: the next page shows its effect, not a snapshot from before it."""
        self._built.clear()
