"""The idempotent-publish window: producer keys seen recently and the placement they received."""

from __future__ import annotations

from collections import OrderedDict


class IdempotencyWindow:
    """Keys are global to the broker. Entries expire `window_ms` after they were stored; the broker
    refills the window from the log tail on start, so it survives a restart."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._entries: OrderedDict[str, tuple[int, bytes]] = OrderedDict()

    def get(self, key: str, now_ms: int) -> bytes | None:
        self.expire(now_ms)
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def put(self, key: str, timestamp_ms: int, result: bytes) -> None:
        if self.window_ms <= 0:
            return
        self._entries[key] = (timestamp_ms, result)
        self._entries.move_to_end(key)

    def expire(self, now_ms: int) -> None:
        # Insertion order is timestamp order (the store's clock is monotonic), so expiry pops the front.
        limit = now_ms - self.window_ms
        entries = self._entries
        while entries:
            first = next(iter(entries.values()))
            if first[0] >= limit:
                break
            entries.popitem(last=False)

    def items(self) -> list[tuple[str, tuple[int, bytes]]]:
        return list(self._entries.items())

    def __len__(self) -> int:
        return len(self._entries)
