"""A queue as the broker holds it in memory: settings from the database, offsets from storage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.expiry import MAX_TTL_SECONDS
from chunkmq.broker.names import check_name

log = logging.getLogger("chunkmq.broker")


class Overflow(StrEnum):
    DROP_HEAD = "drop_head"
    REJECT_PUBLISH = "reject_publish"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What PUT /queues/{name} declares; two declares are identical when these are equal."""

    max_messages: int | None = None
    max_bytes: int | None = None
    max_age_seconds: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_deliveries: int | None = None
    ack_timeout_ms: int = 30_000
    message_ttl_seconds: int | None = None  # messages expire this long after publish (app/broker/expiry.py)

    @classmethod
    def names(cls) -> frozenset[str]:
        return _SETTING_NAME_SET

    @classmethod
    def stored(cls, row: Any) -> QueueSettings:
        """The settings of a queue row the database holds: validated when they were declared, so a
        start builds them without parse's checks (a hundred thousand queues at every restart)."""
        values = {name: getattr(row, name) for name in _SETTING_NAMES}
        values["overflow"] = Overflow(values["overflow"])
        return cls(**values)

    @classmethod
    def parse(cls, body: dict[str, Any], base: QueueSettings | None = None) -> QueueSettings:
        """Validate settings from a request body; fields absent from it keep `base` (or defaults)."""
        values = (base or cls()).as_dict()
        for name in cls.names() & body.keys():
            values[name] = body[name]
        for name in ("max_messages", "max_bytes", "max_age_seconds", "max_deliveries"):
            value = values[name]
            if value is not None and (type(value) is not int or not 1 <= value <= 2**63 - 1):  # SQLite's INTEGER
                raise InvalidInput(f"{name} must be a positive integer (at most 2^63-1) or null")
        ttl = values["message_ttl_seconds"]
        if ttl is not None and (type(ttl) is not int or not 1 <= ttl <= MAX_TTL_SECONDS):
            raise InvalidInput(f"message_ttl_seconds must be an integer from 1 to {MAX_TTL_SECONDS} or null")
        timeout = values["ack_timeout_ms"]
        if type(timeout) is not int or not 1 <= timeout <= 24 * 3600 * 1000:
            raise InvalidInput("ack_timeout_ms must be an integer from 1 to 86400000")
        try:
            values["overflow"] = Overflow(values["overflow"])
        except ValueError:
            raise InvalidInput("overflow must be drop_head or reject_publish") from None
        if values["dead_letter_exchange"] is not None:
            dlx = values["dead_letter_exchange"]
            if dlx != "" and dlx != "amq.default":
                check_name(dlx, "dead_letter_exchange")
        rk = values["dead_letter_routing_key"]
        if rk is not None and (type(rk) is not str or len(rk) > 255):
            raise InvalidInput("dead_letter_routing_key must be a string of at most 255 characters")
        return cls(**values)

    @property
    def message_ttl_ms(self) -> int | None:
        return self.message_ttl_seconds * 1000 if self.message_ttl_seconds is not None else None

    def as_dict(self) -> dict[str, Any]:
        # Every field is a plain value: no deep copy (dataclasses.asdict was half the cost of a
        # queue view, which the read model builds for every queue on every history sample).
        d = {name: getattr(self, name) for name in _SETTING_NAMES}
        d["overflow"] = self.overflow.value
        return d


_SETTING_NAMES = tuple(f.name for f in fields(QueueSettings))
_SETTING_NAME_SET = frozenset(_SETTING_NAMES)


@dataclass(eq=False, slots=True)
class Queue:
    id: int
    name: str
    settings: QueueSettings
    producer_visible: bool = True
    consumer_visible: bool = True
    messages_in: int = 0
    messages_dropped: int = 0  # by limits (drop_head, max_age) and the drop_oldest disk budget
    dead_lettered: int = 0  # sent to the dead-letter exchange since start (the dead_letters alert counts these)
    expired: int = 0  # passed as expired by its groups since start (dead-lettered too with a dead-letter exchange)
    committed_dropped: int = 0  # messages_dropped as last written to the database
    delivered: int = 0  # deliveries to any group, redeliveries included (the history's deliver rate)
    name_json: bytes = b""
    groups: dict[str, Any] = field(default_factory=dict)  # name -> chunkmq.broker.group.Group
    # Called by `notify`, in the notifier's call: consumers that deliver at once (`push_to`).
    pushers: tuple[Callable[[], None], ...] = ()

    def __post_init__(self) -> None:
        self.name_json = b'"%b"' % self.name.encode()  # names are [A-Za-z0-9._:-]: nothing to escape

    def notify(self) -> None:
        """Something may be deliverable (a publish, due redeliveries, a seek, a deleted group):
        every consumer waiting for messages is told through its pusher, now."""
        if self.pushers:
            _push(self.pushers)

    def push_to(self, pusher: Callable[[], None]) -> Callable[[], None]:
        """Have `pusher` called by every notify, before the notifier goes on (a publish: before its
        confirm is written). A waiting consumer that delivers there writes the message in the same
        loop turn as the publish, ahead of the publisher's answer, instead of a turn (and, on a busy
        machine, the publisher's own wake-up) later. Returns the function that stops it."""
        self.pushers += (pusher,)

        def stop() -> None:
            self.pushers = tuple(p for p in self.pushers if p is not pusher)

        return stop


_pending: list[tuple[Callable[[], None], ...]] | None = None  # pushers to run, while some run


def _push(pushers: tuple[Callable[[], None], ...]) -> None:
    """Run the pushers; those of a notify inside one (a dead-letter while delivering) run after it:
    no delivery inside another."""
    global _pending
    if _pending is not None:
        _pending.append(pushers)
        return
    _pending = [pushers]
    try:
        for batch in _pending:  # grows while it runs
            for pusher in batch:
                try:
                    pusher()
                except Exception:  # never the notifier's failure: a publish is stored by now
                    log.exception("delivering to a waiting consumer failed")
    finally:
        _pending = None
