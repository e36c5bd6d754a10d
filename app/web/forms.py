"""Reading console forms (application/x-www-form-urlencoded) into the bodies the broker takes.

The console's forms carry no files, so the body is parsed here with the standard library instead
of pulling in a multipart parser.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import Request

from chunkmq.broker.errors import InvalidInput
from chunkmq.broker.queue import QueueSettings

MAX_FORM_BYTES = 8 * 1024 * 1024


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


_INT_SETTINGS = ("max_messages", "max_bytes", "max_age_seconds", "max_deliveries", "ack_timeout_ms")
_STR_SETTINGS = ("dead_letter_exchange", "dead_letter_routing_key")


def queue_settings(form: dict[str, str]) -> dict[str, Any]:
    """A queue's settings from the settings form: blank fields mean "no limit" (or the default)."""
    body: dict[str, Any] = {k: optional_int(form, k) for k in _INT_SETTINGS if k in QueueSettings.names()}
    body.update({k: optional_str(form, k) for k in _STR_SETTINGS})
    if body.get("ack_timeout_ms") is None:
        body.pop("ack_timeout_ms", None)  # blank: keep the default
    if form.get("overflow"):
        body["overflow"] = form["overflow"]
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
