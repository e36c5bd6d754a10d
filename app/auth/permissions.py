"""What a token may do: RabbitMQ-style configure / write / read regexes over resource names.

- configure: declare and delete exchanges and queues, bind (on the queue and the exchange), groups.
- write: publish to an exchange (or queue).
- read: pull, ack, seek on a queue.

A pattern must match the whole name (fullmatch). "" matches nothing (the default: a new token can do
nothing until granted), ".*" matches every name. An admin token is allowed everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

Action = Literal["configure", "write", "read"]
ACTIONS: tuple[Action, ...] = ("configure", "write", "read")


class InvalidPattern(ValueError):
    """Raised when a permission pattern is not a valid regular expression."""

    def __init__(self, action: str, pattern: str, reason: str) -> None:
        super().__init__(f"invalid {action} pattern {pattern!r}: {reason}")
        self.action = action
        self.pattern = pattern


def compile_pattern(action: str, pattern: str) -> re.Pattern[str] | None:
    """The compiled regex, or None for "" (nothing allowed). Raises InvalidPattern."""
    if pattern == "":
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InvalidPattern(action, pattern, str(e)) from e


class _HasPermissions(Protocol):
    @property
    def is_admin(self) -> bool: ...
    @property
    def configure(self) -> str: ...
    @property
    def write(self) -> str: ...
    @property
    def read(self) -> str: ...


@dataclass(frozen=True)
class Permissions:
    """The rights of one token; patterns are compiled once, when this is built."""

    is_admin: bool = False
    configure: str = ""
    write: str = ""
    read: str = ""
    _compiled: dict[str, re.Pattern[str] | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = {action: compile_pattern(action, getattr(self, action)) for action in ACTIONS}
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def of(cls, token: _HasPermissions) -> Permissions:
        """The permissions of anything shaped like a token (e.g. chunkmq.meta.TokenRow)."""
        return cls(token.is_admin, token.configure, token.write, token.read)

    def allows(self, action: Action, resource: str) -> bool:
        if self.is_admin:
            return True
        pattern = self._compiled[action]  # KeyError on an unknown action: a programming error
        return pattern is not None and pattern.fullmatch(resource) is not None
