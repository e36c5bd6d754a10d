"""The state machine of one alert, i.e. one (rule, queue, group).

    OK ──breach──> PENDING ──held for `for`──> FIRING ──below 90% for `for`──> RESOLVED
     ^               │                           │  └─ reminder every `renotify` (0: never)
     └──── clear ────┘                           │
    RESOLVED ──breach──> PENDING ...             └── one mail on FIRING, one on RESOLVED

Breach: value >= threshold (and > 0). A firing alert resolves only once the value has stayed below
RESOLVE_RATIO x threshold for the rule's `for` duration, so a value hovering at the line does not
flap. Times are epoch milliseconds, so a persisted state keeps its meaning across a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

RESOLVE_RATIO = 0.9


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


class State(StrEnum):
    OK = "ok"
    PENDING = "pending"  # breached, not yet for the `for` duration
    FIRING = "firing"
    RESOLVED = "resolved"  # fired, then cleared; a new breach starts over at PENDING


class Notice(StrEnum):
    """What a transition tells the recipients."""

    FIRING = "firing"
    RESOLVED = "resolved"
    REMINDER = "reminder"


@dataclass(slots=True)
class Alert:
    rule_id: int
    queue: str
    group: str
    state: State = State.OK
    value: float = 0.0
    since_ms: int = 0  # when it entered `state`
    breach_since_ms: int | None = None  # start of the breach that made it PENDING
    clear_since_ms: int | None = None  # FIRING: since when the value has been below the resolve line
    fired_at_ms: int | None = None
    notified_at_ms: int | None = None  # the last mail about it (fire or reminder); None: not mailed yet

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.rule_id, self.queue, self.group)

    def _enter(self, state: State, now_ms: int, transitions: list[tuple[State, State]]) -> None:
        transitions.append((self.state, state))
        self.state = state
        self.since_ms = now_ms

    def step(self, value: float, threshold: float, for_ms: int, renotify_ms: int,
             now_ms: int) -> tuple[list[tuple[State, State]], Notice | None]:
        """Feed one measurement; returns the transitions (old, new) it caused and the notice to send."""
        self.value = value
        breached = value > 0 and value >= threshold
        cleared = value <= 0 or value < threshold * RESOLVE_RATIO
        transitions: list[tuple[State, State]] = []
        if self.state in (State.OK, State.RESOLVED) and breached:
            self.breach_since_ms = now_ms
            self._enter(State.PENDING, now_ms, transitions)
        if self.state is State.PENDING:
            if not breached:
                self.breach_since_ms = None
                self._enter(State.OK, now_ms, transitions)
            elif now_ms - _or(self.breach_since_ms, now_ms) >= for_ms:
                self._enter(State.FIRING, now_ms, transitions)
                self.fired_at_ms = self.notified_at_ms = now_ms
                self.clear_since_ms = None
                return transitions, Notice.FIRING
        elif self.state is State.FIRING:
            if cleared:
                self.clear_since_ms = self.clear_since_ms if self.clear_since_ms is not None else now_ms
                if now_ms - self.clear_since_ms >= for_ms:
                    return self.resolve(now_ms, transitions), Notice.RESOLVED
            else:
                self.clear_since_ms = None
                if renotify_ms > 0 and now_ms - _or(self.notified_at_ms, now_ms) >= renotify_ms:
                    self.notified_at_ms = now_ms
                    return transitions, Notice.REMINDER
        return transitions, None

    def resolve(self, now_ms: int, transitions: list[tuple[State, State]] | None = None) -> list[tuple[State, State]]:
        """FIRING -> RESOLVED (also when what it watched is gone)."""
        transitions = [] if transitions is None else transitions
        self.clear_since_ms = self.breach_since_ms = None
        self._enter(State.RESOLVED, now_ms, transitions)
        return transitions
