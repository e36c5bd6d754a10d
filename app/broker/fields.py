"""Checks of request body fields that say which field is wrong and why (every body is strict)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from chunkmq.broker.errors import InvalidInput


def reject_unknown(body: Mapping[str, Any], allowed: Collection[str], where: str = "") -> None:
    """Refuse fields the endpoint does not know: a misspelt `requeue` silently ignored would do the
    opposite of what the client asked."""
    unknown = body.keys() - set(allowed)
    if unknown:
        prefix = f"{where}: " if where else ""
        raise InvalidInput(
            f"{prefix}unknown field{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )


MAX_INT = 2**63 - 1  # offsets, timestamps and settings are stored as 64-bit integers


def non_negative_int(body: Mapping[str, Any], field: str) -> int:
    value = body[field]
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise InvalidInput(f"{field} must be a non-negative integer")
    return value


def boolean(body: Mapping[str, Any], field: str, default: bool) -> bool:
    value = body.get(field, default)
    if type(value) is not bool:
        raise InvalidInput(f"{field} must be true or false")
    return value
