"""Alert rules and what each kind measures on the broker's read model.

| kind           | per          | value (compared with `threshold`)                                      |
|----------------|--------------|------------------------------------------------------------------------|
| lag_messages   | queue, group | messages the group has not finished                                    |
| lag_seconds    | queue, group | age in seconds of the oldest unacked message                           |
| stalled        | queue, group | seconds since the ack floor last moved, while messages wait (else 0)   |
| no_consumers   | queue, group | seconds since a consumer was last seen, while messages wait (else 0)   |
| dead_letters   | queue        | messages dead-lettered in the last `window_seconds`                    |
| queue_full     | queue        | percent of the queue's max_messages / max_bytes in use (the higher)    |
| disk           | the broker   | percent of the disk budget in use; without a budget, percent of the    |
|                |              | store's bytes plus the free disk space                                 |
| time_to_clear  | queue, group | seconds until the lag is gone at its current rate of fall              |
|                |              | (app/broker/clearing.py); NEVER once the lag has not fallen for the    |
|                |              | rule's `window_seconds`; 0 without lag                                 |

Queue-level kinds use the group "" and the broker-level kind the queue "" too. A queue without any
consumer group is watched by the group kinds too, as group "" (when the rule's group glob matches the
empty name, as `*` does): a reader that has read nothing, so every message in the queue waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from chunkmq.alerts.trend import UNREAD, Watch
from chunkmq.broker.views import GroupView, Overview, QueueView
from chunkmq.meta.alerts import AlertRuleRow
from chunkmq.meta.models import ALERT_KINDS


class Kind(StrEnum):
    LAG_MESSAGES = "lag_messages"
    LAG_SECONDS = "lag_seconds"
    STALLED = "stalled"
    NO_CONSUMERS = "no_consumers"
    DEAD_LETTERS = "dead_letters"
    QUEUE_FULL = "queue_full"
    DISK = "disk"
    TIME_TO_CLEAR = "time_to_clear"


GROUP_KINDS = frozenset({Kind.LAG_MESSAGES, Kind.LAG_SECONDS, Kind.STALLED, Kind.NO_CONSUMERS, Kind.TIME_TO_CLEAR})
# time_to_clear of a lag that has not fallen for the rule's window: it never clears at these rates
# (a finite number, so that it is stored, mailed and answered as JSON like any other value).
NEVER = 1e9
# The kinds whose value grows with time (a second per second) while messages wait on a queue that does
# not change; the others move only when the queue does.
GROWING = frozenset({Kind.LAG_SECONDS, Kind.STALLED, Kind.NO_CONSUMERS})
UNITS = {
    Kind.LAG_MESSAGES: "messages", Kind.LAG_SECONDS: "s", Kind.STALLED: "s", Kind.NO_CONSUMERS: "s",
    Kind.DEAD_LETTERS: "messages", Kind.QUEUE_FULL: "%", Kind.DISK: "%", Kind.TIME_TO_CLEAR: "s",
}
DESCRIPTIONS = {
    Kind.LAG_MESSAGES: "group lag", Kind.LAG_SECONDS: "oldest unacked message",
    Kind.STALLED: "ack floor not moving", Kind.NO_CONSUMERS: "no consumer seen",
    Kind.DEAD_LETTERS: "messages dead-lettered", Kind.QUEUE_FULL: "queue limit used",
    Kind.DISK: "disk used", Kind.TIME_TO_CLEAR: "time to clear the lag",
}


_GLOB = r"^[A-Za-z0-9._:\-*?\[\]!]{1,200}$"
# No spaces or controls, spelt out: `\s` differs between Python, pydantic's Rust and JSON Schema's regexes.
_ADDRESS_CHAR = r"[^@,<>\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
ADDRESS = rf"^{_ADDRESS_CHAR}+@{_ADDRESS_CHAR}+$"
Address = Annotated[str, Field(pattern=ADDRESS, max_length=254)]


class RuleSpec(BaseModel):
    """A rule as users write it (API body, console form): validated before it is stored."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal[ALERT_KINDS]  # type: ignore[valid-type]
    queue: str = Field("*", pattern=_GLOB, description="glob over queue names")
    group: str = Field("*", pattern=_GLOB, description="glob over group names")
    threshold: float = Field(ge=0, le=1e15)
    for_seconds: float = Field(0, ge=0, le=7 * 86400, description="how long the condition must hold")
    renotify_seconds: float = Field(3600, ge=0, le=30 * 86400, description="reminder interval; 0 = once")
    window_seconds: float = Field(300, gt=0, le=7 * 86400, description=(
        "dead_letters: the window counted; time_to_clear: how long a lag may grow or stand still"))
    recipients: list[Address] = Field(default_factory=list, max_length=50, description="empty: CHUNKMQ_SMTP_TO")
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured (queue, group) of a rule, with the numbers a mail shows."""

    queue: str
    group: str
    value: float
    lag: int = 0
    lag_seconds: float = 0.0
    consumers: int = 0
    paused: bool = False  # the group is paused (POST .../pause): its lag grows by choice, not a stall


def matches(rule: AlertRuleRow, queue: str, group: str | None = None) -> bool:
    return fnmatchcase(queue, rule.queue) and (group is None or fnmatchcase(group, rule.group))


def _of_group(q: QueueView, g: GroupView, value: float) -> Observation:
    return Observation(q.name, g.name, value, g.lag, g.lag_seconds, len(g.consumers), g.paused)


def _of_queue(q: QueueView, value: float) -> Observation:
    worst = q.worst_group
    if worst is None:
        return Observation(q.name, "", value)
    return Observation(q.name, "", value, worst.lag, worst.lag_seconds, sum(len(g.consumers) for g in q.groups))


def unread(q: QueueView, oldest_ms: int | None, now_ms: int) -> GroupView:
    """A queue without consumer groups as the one reader nobody is: everything in it is lag, as old as
    its oldest message (`oldest_ms`, the timestamp of its first offset), with no consumer."""
    age = max(0, now_ms - oldest_ms) / 1000 if oldest_ms is not None and q.messages else 0.0
    return GroupView(queue=q.name, name=UNREAD, ack_floor=q.first_offset, next_offset=q.first_offset,
                     lag=q.messages, lag_seconds=age, oldest_unacked_age_ms=round(age * 1000), in_flight=0,
                     pending_redelivery=0, consumers=(),
                     tag_filter=None, missed=0, behind_retention=False, acked=0,
                     clearing="steady" if q.messages else "clear", time_to_clear_seconds=None if q.messages else 0.0)


FloorMovedAt = Callable[[str, str], int | None]  # (queue, group) -> epoch ms (the broker's history)


def _time_to_clear(rule: AlertRuleRow, g: GroupView, q: QueueView, watch: Watch, now_ms: int) -> float:
    if g.lag <= 0:
        return 0.0
    if g.clearing == "clearing" and g.time_to_clear_seconds is not None:
        return g.time_to_clear_seconds
    since = watch.not_clearing_since(q.name, g.name)
    return NEVER if since is not None and now_ms - since >= rule.window_seconds * 1000 else 0.0


def _group_value(rule: AlertRuleRow, kind: Kind, g: GroupView, q: QueueView, floor_moved_at: FloorMovedAt,
                 watch: Watch, now_ms: int) -> float:
    if kind is Kind.LAG_MESSAGES:
        return g.lag
    if kind is Kind.LAG_SECONDS:
        return g.lag_seconds
    if kind is Kind.TIME_TO_CLEAR:
        return _time_to_clear(rule, g, q, watch, now_ms)
    if g.lag <= 0:  # stalled and no_consumers need messages waiting: an idle queue is fine
        return 0.0
    # A queue without groups has no ack floor: stalled, as no_consumers, since messages began to wait.
    stalled = kind is Kind.STALLED and g.name != UNREAD
    since = floor_moved_at(q.name, g.name) if stalled else watch.consumer_seen_at(q.name, g.name)
    return 0.0 if since is None else max(0.0, (now_ms - since) / 1000)


def measure(rule: AlertRuleRow, queues: Iterable[QueueView], overview: Overview | None,
            floor_moved_at: FloorMovedAt, watch: Watch, now_ms: int) -> list[Observation]:
    """Every (queue, group) the rule covers, with its current value (`overview` is needed for disk)."""
    kind = Kind(rule.kind)
    if kind is Kind.DISK:
        assert overview is not None
        totals = overview.totals
        if totals.disk_budget_bytes:
            percent = totals.disk_used_bytes / totals.disk_budget_bytes * 100
        else:
            room = totals.disk_used_bytes + totals.disk_free_bytes
            percent = totals.disk_used_bytes / room * 100 if room else 0.0
        return [Observation("", "", round(percent, 6))]
    out = []
    for q in queues:
        if not matches(rule, q.name):
            continue
        if kind in GROUP_KINDS:
            out.extend(_of_group(q, g, _group_value(rule, kind, g, q, floor_moved_at, watch, now_ms))
                       for g in q.groups if fnmatchcase(g.name, rule.group))
        elif kind is Kind.DEAD_LETTERS:
            out.append(_of_queue(q, watch.dead_lettered_since(q.name, now_ms - int(rule.window_seconds * 1000))))
        elif kind is Kind.QUEUE_FULL:
            limits = [(q.messages, q.settings.get("max_messages")), (q.bytes, q.settings.get("max_bytes"))]
            used = [have / limit * 100 for have, limit in limits if limit]
            if used:
                out.append(_of_queue(q, round(max(used), 2)))
    return out
