"""Reading console forms (application/x-www-form-urlencoded) into the bodies the broker takes.

The console's forms carry no files, so the body is parsed here with the standard library instead
of pulling in a multipart parser.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import orjson
from fastapi import Request

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.expiry import MAX_TTL_SECONDS
from chunkmq.broker.names import DEFAULT_EXCHANGE_ALIAS, MAX_ROUTING_KEY, check_name, check_new_name
from chunkmq.broker.queue import Overflow

MAX_FORM_BYTES = 8 * 1024 * 1024
T = TypeVar("T")


async def read_form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidInput("the form is too large")
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidInput("the form is not UTF-8") from None
    return dict(parse_qsl(text, keep_blank_values=True))


def optional_int(form: dict[str, str], key: str) -> int | None:
    raw = form.get(key, "").strip()
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"{key} must be a whole number, not {raw!r}") from None


def optional_str(form: dict[str, str], key: str) -> str | None:
    raw = form.get(key, "").strip()
    return raw or None


class Problems:
    """The bad fields of one form, so that one error names every one of them, not only the first."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.codes: set[str] = set()

    def check(self, label: str, value: Callable[[], T]) -> T | None:
        """`value()`, or None after noting its error as "<label>: <message>" (the message alone without a label)."""
        try:
            return value()
        except InvalidInput as e:
            self.messages.append(f"{label}: {e.message}" if label else e.message)
            self.codes.add(e.code)
            return None

    def raise_any(self) -> None:
        """One InvalidInput naming every problem, with their code when they share one (the API's
        answer to the same input: invalid_name for a bad name alone)."""
        if self.messages:
            raise InvalidInput("; ".join(self.messages), code=self.codes.pop() if len(self.codes) == 1 else None)


def whole_number(form: dict[str, str], key: str, low: int, high: int) -> int | None:
    """A blank field is None; otherwise a whole number from `low` to `high`."""
    raw = form.get(key, "").strip()
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"must be a whole number, not {raw!r}") from None
    if value < low:
        raise InvalidInput(f"must be {low} or more")
    if value > high:
        raise InvalidInput(f"must be at most {'2^63-1' if high == _MAX_INT else f'{high:,}'}")
    return value


_MAX_INT = 2**63 - 1  # SQLite's INTEGER
# field: (label on the form, highest value); every limit is at least 1, blank is "no limit"
_INT_SETTINGS = {
    "max_messages": ("Max messages", _MAX_INT),
    "max_bytes": ("Max bytes", _MAX_INT),
    "max_age_seconds": ("Max age (s)", _MAX_INT),
    "max_deliveries": ("Max deliveries", _MAX_INT),
    "ack_timeout_ms": ("Ack timeout (ms)", 24 * 3600 * 1000),
    "message_ttl_seconds": ("Message TTL (s)", MAX_TTL_SECONDS),
}
_STR_SETTINGS = {"dead_letter_exchange": "Dead-letter exchange", "dead_letter_routing_key": "Dead-letter routing key",
                 "overflow": "Overflow"}


def queue_settings(form: dict[str, str], new_name: str | None = None) -> dict[str, Any]:
    """A queue's settings from the settings form: blank fields mean "no limit" (or the default).
    Every bad field, and `new_name` (a queue being declared), is named in one InvalidInput."""
    problems = Problems()
    if new_name is not None:
        problems.check("", lambda: check_new_name(new_name, "queue name"))
    body: dict[str, Any] = {}
    for key, (label, high) in _INT_SETTINGS.items():
        body[key] = problems.check(label, partial(whole_number, form, key, 1, high))
    body.update({k: optional_str(form, k) for k in _STR_SETTINGS})
    if body["ack_timeout_ms"] is None:
        body.pop("ack_timeout_ms")  # blank: keep the default
    if body["overflow"] is None:
        body.pop("overflow")
    # The broker checks these again; here each bad one gets a message of its own.
    dlx, key = body["dead_letter_exchange"], body["dead_letter_routing_key"]
    if dlx not in (None, DEFAULT_EXCHANGE_ALIAS):
        problems.check(_STR_SETTINGS["dead_letter_exchange"], lambda: check_name(dlx, "exchange name"))
    if key is not None and len(key) > MAX_ROUTING_KEY:
        label = _STR_SETTINGS["dead_letter_routing_key"]
        problems.messages.append(f"{label}: must be at most {MAX_ROUTING_KEY} characters")
    if body.get("overflow", Overflow.DROP_HEAD) not in set(Overflow):
        problems.messages.append(f"{_STR_SETTINGS['overflow']}: must be {' or '.join(Overflow)}")
    problems.raise_any()
    return body


def json_object(text: str, what: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise InvalidInput(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object")
    return value


def utc_ms(text: str) -> int:
    """Epoch milliseconds from an <input type=datetime-local> value (taken as UTC) or epoch ms."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"not a time: {text!r} (use YYYY-MM-DDTHH:MM[:SS], UTC)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def confirmed(form: dict[str, str]) -> None:
    """Destructive actions need the confirmation box ticked (no JavaScript dialogs under the CSP)."""
    if form.get("confirm") != "yes":
        raise InvalidInput("tick the confirmation box to do this")
