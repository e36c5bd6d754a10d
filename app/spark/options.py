"""The options of `format("chunkmq")`, named as Spark's Kafka source names them (docs/spark.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from chunkmq.spark.errors import OptionError
from chunkmq.spark.http import Api

EARLIEST, LATEST = -2, -1  # as in Kafka's JSON offsets


@dataclass(frozen=True)
class SourceOptions:
    url: str
    token: str | None
    subscribe: tuple[str, ...]
    pattern: str | None
    starting: str  # "earliest" | "latest" | JSON
    ending: str
    starting_timestamp: int | None
    max_per_trigger: int | None
    min_partitions: int | None  # None: split across the planning machine's cores (reader.plan)
    max_per_partition: int
    fail_on_data_loss: bool
    include_headers: bool
    group: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        o = {k.lower(): v for k, v in options.items()}
        subscribe = tuple(q.strip() for q in o.get("subscribe", "").split(",") if q.strip())
        pattern = o.get("subscribepattern")
        if bool(subscribe) == bool(pattern):
            raise OptionError("give exactly one of the options subscribe (a list of queues) or subscribePattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise OptionError(f"subscribePattern is not a regular expression: {e}") from None
        if streaming and "endingoffsets" in o:
            raise OptionError("endingOffsets is for batch reads only")
        return cls(
            url=o.get("url", "http://127.0.0.1:8000"),
            token=o.get("token") or None,
            subscribe=subscribe,
            pattern=pattern,
            starting=o.get("startingoffsets", "latest" if streaming else "earliest"),
            ending=o.get("endingoffsets", "latest"),
            starting_timestamp=_int(o, "startingtimestamp", 0),
            max_per_trigger=_int(o, "maxoffsetspertrigger", 1),
            min_partitions=_int(o, "minpartitions", 1),
            max_per_partition=_int(o, "maxrecordsperpartition", 1) or 1_000_000,
            fail_on_data_loss=_bool(o, "failondataloss", True),
            include_headers=_bool(o, "includeheaders", True),
            group=o.get("group") or None,
        )

    def queues(self, api: Api, strict: bool = True) -> dict[str, dict[str, Any]]:
        """The subscribed queues that exist now, name -> queue object (first/next offset). ``strict``:
        a subscribed queue that does not exist is an error (a running stream reports it as data loss)."""
        every = {q["name"]: q for q in api.queues()}
        if self.pattern is not None:
            rx = re.compile(self.pattern)
            return {name: q for name, q in sorted(every.items()) if rx.fullmatch(name)}
        missing = [name for name in self.subscribe if name not in every]
        if missing and strict:
            raise OptionError(f"no queue named {', '.join(map(repr, missing))}")
        return {name: every[name] for name in self.subscribe if name in every}

    def start_offsets(self, api: Api, queues: dict[str, dict[str, Any]]) -> dict[str, int]:
        if self.starting_timestamp is not None:
            return {name: api.offset_for_timestamp(name, self.starting_timestamp) for name in queues}
        return _resolve(self.starting, queues, "startingOffsets")

    def end_offsets(self, queues: dict[str, dict[str, Any]]) -> dict[str, int]:
        return _resolve(self.ending, queues, "endingOffsets")


def _resolve(spec: str, queues: dict[str, dict[str, Any]], option: str) -> dict[str, int]:
    """earliest / latest / JSON {"queue": offset} (-2 earliest, -1 latest) -> queue -> offset."""
    spec = spec.strip()
    if spec in ("earliest", "latest"):
        chosen = {name: EARLIEST if spec == "earliest" else LATEST for name in queues}
    else:
        try:
            chosen = orjson.loads(spec)
        except orjson.JSONDecodeError:
            raise OptionError(f"{option} must be earliest, latest or a JSON object of queue offsets") from None
        if type(chosen) is not dict or not all(type(v) is int and v >= -2 for v in chosen.values()):
            raise OptionError(f"{option} must map queue names to offsets (-2 earliest, -1 latest)")
        unknown = sorted(set(chosen) - set(queues))
        if unknown:
            raise OptionError(f"{option} names queues that are not subscribed: {', '.join(unknown)}")
        chosen = {name: chosen.get(name, LATEST if option == "endingOffsets" else EARLIEST) for name in queues}
    return {
        name: q["first_offset"] if off == EARLIEST else q["next_offset"] if off == LATEST else off
        for name, q in queues.items()
        for off in (chosen[name],)
    }


def _int(o: dict[str, str], key: str, minimum: int) -> int | None:
    if key not in o:
        return None
    try:
        value = int(o[key])
    except ValueError:
        raise OptionError(f"option {key} must be an integer, got {o[key]!r}") from None
    if value < minimum:
        raise OptionError(f"option {key} must be at least {minimum}")
    return value


def _bool(o: dict[str, str], key: str, default: bool) -> bool:
    value = o.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise OptionError(f"option {key} must be true or false")
    return value.lower() == "true"
