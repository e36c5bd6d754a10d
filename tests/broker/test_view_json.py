"""The JSON of views (app/broker/view_json.py): fields in order, internal fields left out, flattened
fields inline, nested views rendered in turn, datetimes as orjson writes them (ISO 8601), anything else
orjson cannot write (a path) as its text."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from chunkmq.broker import view_json, views


@dataclasses.dataclass(frozen=True)
class Inner:
    id: str
    secret: int = dataclasses.field(default=0, metadata={"internal": True})


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    settings: dict[str, Any] = dataclasses.field(metadata={"flatten": True})
    inner: list[Inner]
    at: datetime
    where: Path


def _outer() -> Outer:
    return Outer("q", {"max_messages": 5, "ttl_ms": None}, [Inner("a", 7), Inner("b", 8)],
                 datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), Path("/data/q"))


def test_as_json_is_one_level_deep_without_internals() -> None:
    out = view_json.as_json(_outer())
    assert list(out) == ["name", "max_messages", "ttl_ms", "inner", "at", "where"]
    assert out["inner"] == [Inner("a", 7), Inner("b", 8)]  # views inside stay views
    assert view_json.as_json(Inner("a", 7)) == {"id": "a"}


def test_dumps_renders_nested_views_and_text_for_the_rest() -> None:
    raw = view_json.dumps({"queues": [_outer()], "count": 1})
    assert orjson.loads(raw) == {
        "queues": [{"name": "q", "max_messages": 5, "ttl_ms": None, "inner": [{"id": "a"}, {"id": "b"}],
                    "at": "2026-01-02T03:04:05+00:00", "where": "/data/q"}],
        "count": 1}
    assert view_json.to_json(_outer()) == orjson.loads(view_json.dumps(_outer()))


def test_views_reexports_the_same_functions() -> None:
    assert views.dumps is view_json.dumps and views.as_json is view_json.as_json
    assert views.to_json is view_json.to_json
