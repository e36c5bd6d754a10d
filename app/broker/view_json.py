"""The JSON of the read model's views (app/broker/views.py), for the API's answers; apart from the views,
which a server's first stage does not load (app/start.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

# A view's JSON is its fields, in order, except those marked internal (views.py `_INTERNAL`); a field
# marked `flatten` (a queue's settings) puts its keys inline. app/api/schemas.py derives the OpenAPI
# document's response schemas from the same fields, so the two cannot drift apart.


_JSON_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _json_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, flatten) of the fields of `cls` that are in its JSON (cached per class)."""
    found = _JSON_FIELDS.get(cls)
    if found is None:
        found = _JSON_FIELDS[cls] = tuple(
            (f.name, "flatten" in f.metadata) for f in dataclasses.fields(cls) if "internal" not in f.metadata)
    return found


def as_json(view: Any) -> dict[str, Any]:
    """A view (any dataclass) as its JSON object, one level deep: the views inside it stay views, which
    `dumps` renders in turn."""
    out: dict[str, Any] = {}
    for name, flatten in _json_fields(type(view)):
        if flatten:
            out.update(getattr(view, name))
        else:
            out[name] = getattr(view, name)
    return out


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_json(value)
    return str(value)  # datetimes, paths: as text


def dumps(value: Any) -> bytes:
    """JSON of views (and of lists and dicts holding them), with orjson: the API's answer bodies."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def to_json(value: Any) -> Any:
    """The JSON value of views, as Python objects (what a client parses from `dumps`)."""
    return orjson.loads(dumps(value))
