"""Validation of the names clients choose: exchanges, queues, groups, consumers."""

from __future__ import annotations

import re

from chunkmq.broker.errors import InvalidInput
from chunkmq.wire import codes

# API.md: 1-200 characters of A-Za-z0-9 . _ - :
_NAME = re.compile(r"[A-Za-z0-9._:\-]{1,200}")
DEFAULT_EXCHANGE = ""
DEFAULT_EXCHANGE_ALIAS = "amq.default"
MAX_ROUTING_KEY = 255  # AMQP's short-string limit


RESERVED_PREFIX = "amq."  # as in RabbitMQ: names the broker owns (amq.default)


_VALID: set[str] = set()  # names that passed: a set lookup instead of the pattern, on every hot request
_VALID_MAX = 10_000


def check_name(name: str, kind: str = "name") -> str:
    if type(name) is str and name in _VALID:
        return name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"invalid {kind} {name!r}: use 1-200 characters of A-Z a-z 0-9 . _ - :", code=codes.INVALID_NAME
        )
    if name in (".", ".."):  # a URL path cannot address them: clients normalise them away
        raise InvalidInput(f"invalid {kind} {name!r}: . and .. are not names", code=codes.INVALID_NAME)
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID.add(name)
    return name


def check_new_name(name: str, kind: str) -> str:
    """A name for a new exchange or queue: valid, and not in the reserved `amq.` namespace."""
    check_name(name, kind)
    if name.startswith(RESERVED_PREFIX):
        raise InvalidInput(f"{kind}s starting with 'amq.' are reserved: {name!r}", code=codes.INVALID_NAME)
    return name


def exchange_from_path(name: str) -> str:
    """The default exchange has no name; in URLs it is addressed as `amq.default`."""
    return DEFAULT_EXCHANGE if name == DEFAULT_EXCHANGE_ALIAS else check_name(name, "exchange name")
