"""Message expiry: when a stored message expires, and the check every delivery makes.

A message expires at the earlier of two times:

- its own: a publish with ``ttl_ms`` stores the header ``x-expires-at`` (epoch ms, as a decimal
  string) in the message's headers and sets FLAG_EXPIRES on its record, so that delivery reads the
  headers of those records only. The on-disk format does not change: it is a header and a caller
  flag bit (docs/decisions.md, "Message expiry").
- its queue's: the record's timestamp plus the queue's ``message_ttl_seconds``, read at delivery,
  so a changed setting applies to the messages already held.

An expired message is not delivered to a group that reaches it: the group passes it as if it had
been acked (Consuming.deliver dead-letters and counts it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from chunkmq.broker.blob import FORMAT1, blob_fields
from chunkmq.storage.model import StoredMessage

EXPIRES_HEADER = "x-expires-at"
FLAG_EXPIRES = 4  # the record's headers hold EXPIRES_HEADER (bit 2 of the caller's flags)
MAX_TTL_MS = 365 * 24 * 3600 * 1000  # a year: ttl_ms and message_ttl_seconds go up to it
MAX_TTL_SECONDS = MAX_TTL_MS // 1000


def own_expiry(data: bytes) -> int | None:
    """The ``x-expires-at`` of a stored blob (one whose record has FLAG_EXPIRES), or None."""
    if not data or data[0] == FORMAT1:
        return None
    headers = blob_fields(data)[2]
    if headers is None:
        return None
    value = orjson.loads(headers).get(EXPIRES_HEADER)
    return int(value) if type(value) is str and value.isdigit() else None


def expires_at(timestamp: int, flags: int, data: bytes, queue_ttl_ms: int | None) -> int | None:
    """Epoch ms at which a stored message expires in a queue with `queue_ttl_ms`; None: never."""
    own = own_expiry(data) if flags & FLAG_EXPIRES else None
    by_queue = timestamp + queue_ttl_ms if queue_ttl_ms is not None else None
    if own is None or by_queue is None:
        return own if by_queue is None else by_queue
    return min(own, by_queue)


@dataclass(slots=True)
class Expiry:
    """One delivery's check (Group.deliver): what it passed as expired, with each one's delivery
    count so far, for the caller to dead-letter and count."""

    queue_ttl_ms: int | None
    now: int  # epoch ms
    expired: list[tuple[StoredMessage, int]] = field(default_factory=list)

    def keep(self, messages: list[StoredMessage], count: int) -> list[StoredMessage]:
        """The messages that have not expired; the others go to `expired` (with `count`)."""
        ttl, now = self.queue_ttl_ms, self.now
        if ttl is None and not any(m[3] & FLAG_EXPIRES for m in messages):
            return messages  # nearly every delivery: no ttl anywhere
        kept: list[StoredMessage] = []
        for m in messages:
            at = expires_at(m[2], m[3], m[5], ttl)
            if at is not None and at <= now:
                self.expired.append((m, count))
            else:
                kept.append(m)
        return kept

    def may_hold_expired(self, page: Any) -> bool:
        """Whether a ColumnPage may hold an expired message (the per-record path then checks)."""
        if self.queue_ttl_ms is not None and len(page) and int(page.timestamps.min()) + self.queue_ttl_ms <= self.now:
            return True
        return bool((page.flags & FLAG_EXPIRES).any())
