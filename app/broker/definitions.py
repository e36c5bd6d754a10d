"""Definitions (RabbitMQ's): a broker's exchanges, queues, bindings, consumer groups and token
permissions as one JSON document, and its import.

A document holds no messages, no offsets and no secrets:

    {"chunkmq_version": "0.1.0",
     "exchanges":   [{"name", "type", "alternate_exchange"}],
     "queues":      [{"name", ...queue settings (PUT /queues/{name})}],
     "bindings":    [{"exchange", "queue", "routing_key", "arguments"}],
     "groups":      [{"queue", "name", "tag_filter", "single_active_consumer" (when true)}],
     "permissions": [{"token", "is_admin", "configure", "write", "read"}]}

An import is checked whole before anything is applied, with the broker's own declare validators:
a bad entry anywhere is an InvalidInput (400) naming it; an entry that differs from what exists
(an exchange of another type, a queue with other settings, a group with another tag filter, a token
name whose tokens all have other permissions) is a PreconditionFailed (409). Entries identical to
what exists are left alone. A permission entry no token matches creates a token of that name: its
secret is returned once, in the import's answer. Every section is optional.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from chunkmq import __version__
from chunkmq.auth.permissions import ACTIONS, InvalidPattern, compile_pattern
from chunkmq.broker.broker import parse_binding, parse_exchange
from chunkmq.broker.consuming import parse_group
from chunkmq.broker.errors import InvalidInput, NotFound, PreconditionFailed
from chunkmq.broker.names import DEFAULT_EXCHANGE, check_name
from chunkmq.broker.queue import QueueSettings
from chunkmq.meta import TokenRow
from chunkmq.meta.types import canonical_json
from chunkmq.wire import codes

if TYPE_CHECKING:
    from chunkmq.broker.broker import Broker

__all__ = ["SECTIONS", "export_definitions", "import_definitions"]

SECTIONS = ("exchanges", "queues", "bindings", "groups", "permissions")
_TOKEN_FIELDS = frozenset({"token", "is_admin", *ACTIONS})
_TOKEN_NAME_MAX = 200


# ---------------------------------------------------------------------- export


def _permission(t: TokenRow) -> dict[str, Any]:
    return {"token": t.name, "is_admin": t.is_admin, "configure": t.configure, "write": t.write, "read": t.read}


def _binding_key(b: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return b["exchange"], b["queue"], b["routing_key"], canonical_json(dict(b["arguments"]))


async def export_definitions(broker: Broker) -> dict[str, Any]:
    """The broker's definitions, each section sorted, so two exports of equal brokers are equal."""
    tokens = await asyncio.to_thread(broker.meta.list_tokens)
    permissions = {canonical_json(p): p for p in map(_permission, tokens)}  # one entry per distinct token
    bindings = [{"exchange": b.exchange, "queue": b.queue, "routing_key": b.routing_key,
                 "arguments": dict(b.arguments)} for b in broker.bindings()]
    queues = sorted(broker.queues.values(), key=lambda q: q.name)
    return {
        "chunkmq_version": __version__,
        "exchanges": [
            {"name": e.name, "type": e.type.value, "alternate_exchange": e.alternate_exchange}
            for e in sorted(broker.routing.exchanges.values(), key=lambda e: e.name) if e.name != DEFAULT_EXCHANGE
        ],
        "queues": [{"name": q.name, **q.settings.as_dict()} for q in queues],
        "bindings": sorted(bindings, key=_binding_key),
        "groups": [
            {"queue": q.name, "name": g.name, "tag_filter": list(g.tag_filter) if g.tag_filter is not None else None,
             **({"single_active_consumer": True} if g.single_active_consumer else {})}
            for q in queues for g in sorted(q.groups.values(), key=lambda g: g.name)
        ],
        "permissions": sorted(permissions.values(), key=lambda p: (p["token"], canonical_json(p))),
    }


# ---------------------------------------------------------------------- import


@dataclass(slots=True)
class _Plan:
    """What an import will create, after every entry was checked; and what already exists."""

    exchanges: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    bindings: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)  # canonical JSON -> permission
    unchanged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SECTIONS, 0))
    conflicts: list[str] = field(default_factory=list)


def _entries(body: Mapping[str, Any], section: str) -> list[tuple[str, Mapping[str, Any]]]:
    entries = body.get(section, [])
    if type(entries) is not list:
        raise InvalidInput(f"{section} must be a list")
    for i, entry in enumerate(entries):
        if type(entry) is not dict:
            raise InvalidInput(f"{section}[{i}] must be an object")
    return [(f"{section}[{i}]", entry) for i, entry in enumerate(entries)]


def _checked(where: str, entry: Mapping[str, Any], check: Callable[[], Any]) -> Any:
    """Run a validator; its error names the entry."""
    try:
        return check()
    except InvalidInput as e:
        name = entry.get("name", entry.get("token"))
        label = f"{where} {name!r}" if isinstance(name, str) else where
        raise InvalidInput(f"{label}: {e.message}", code=e.code) from None


def _once(seen: dict[Any, Any], where: str, key: Any, value: Any) -> bool:
    """False when the import named this thing before (identically; differently is a 400)."""
    if key in seen:
        if seen[key] != value:
            raise InvalidInput(f"{where}: {key!r} is defined twice, differently")
        return False
    seen[key] = value
    return True


def _plan(broker: Broker, body: Mapping[str, Any], tokens: list[TokenRow]) -> _Plan:
    unknown = body.keys() - {*SECTIONS, "chunkmq_version"}
    if unknown:
        raise InvalidInput(f"unknown sections: {', '.join(sorted(unknown))}")
    if not isinstance(body.get("chunkmq_version"), str | None):
        raise InvalidInput("chunkmq_version must be a string or null")
    plan = _Plan()
    seen: dict[Any, Any] = {}

    for where, e in _entries(body, "exchanges"):
        name = e.get("name")
        kind, alternate = _checked(
            where, e, lambda e=e, name=name: parse_exchange(name, {k: v for k, v in e.items() if k != "name"})
        )
        if not _once(seen, where, ("exchange", name), (kind, alternate)):
            continue
        existing = broker.routing.exchanges.get(name)
        if existing is None:
            plan.exchanges[name] = {"type": kind.value, "alternate_exchange": alternate}
        elif (existing.type, existing.alternate_exchange) == (kind, alternate):
            plan.unchanged["exchanges"] += 1
        else:
            plan.conflicts.append(f"{where}: exchange {name!r} exists with other settings: " + _differences(
                {"type": existing.type.value, "alternate_exchange": existing.alternate_exchange},
                {"type": kind.value, "alternate_exchange": alternate}))

    for where, e in _entries(body, "queues"):
        name = e.get("name")

        def queue_settings(e: Mapping[str, Any] = e, name: Any = name) -> QueueSettings:
            check_name(name, "queue name")
            unknown = e.keys() - QueueSettings.names() - {"name"}
            if unknown:
                raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
            return QueueSettings.parse({k: v for k, v in e.items() if k != "name"})

        settings = _checked(where, e, queue_settings)
        if not _once(seen, where, ("queue", name), settings):
            continue
        existing_queue = broker.queues.get(name)
        if existing_queue is None:
            plan.queues[name] = settings.as_dict()
        elif existing_queue.settings == settings:
            plan.unchanged["queues"] += 1
        else:
            plan.conflicts.append(f"{where}: queue {name!r} exists with other settings: "
                                  + _differences(existing_queue.settings.as_dict(), settings.as_dict()))

    def queue_known(name: str) -> bool:
        return name in broker.queues or name in plan.queues

    for where, e in _entries(body, "bindings"):
        exchange, queue, routing_key, arguments = _checked(where, e, lambda e=e: parse_binding(e))
        if exchange not in broker.routing.exchanges and exchange not in plan.exchanges:
            raise NotFound(f"{where}: exchange {exchange!r} is neither defined nor declared",
                           code=codes.EXCHANGE_NOT_FOUND)
        if not queue_known(queue):
            raise NotFound(f"{where}: queue {queue!r} is neither defined nor declared", code=codes.QUEUE_NOT_FOUND)
        binding = {"exchange": exchange, "queue": queue, "routing_key": routing_key, "arguments": arguments}
        key = _binding_key(binding)
        if not _once(seen, where, ("binding", key), key):
            continue
        exists = any(_binding_key({"exchange": b.exchange, "queue": b.queue, "routing_key": b.routing_key,
                                   "arguments": b.arguments}) == key for b in broker.bindings(exchange, queue))
        if exists:
            plan.unchanged["bindings"] += 1
        else:
            plan.bindings[key] = binding

    for where, e in _entries(body, "groups"):
        queue, name = e.get("queue"), e.get("name")

        def group_settings(e: Mapping[str, Any] = e, queue: Any = queue,
                           name: Any = name) -> tuple[tuple[str, ...] | None, bool]:
            check_name(queue, "queue name")
            _, tags, single = parse_group(name, {k: v for k, v in e.items() if k not in ("queue", "name")})
            return tags, bool(single)

        settings = _checked(where, e, group_settings)
        tag_filter, single = settings
        if not queue_known(queue):
            raise NotFound(f"{where}: queue {queue!r} is neither defined nor declared", code=codes.QUEUE_NOT_FOUND)
        if not _once(seen, where, ("group", queue, name), settings):
            continue
        q = broker.queues.get(queue)
        existing_group = q.groups.get(name) if q is not None else None
        if existing_group is None:
            plan.groups[(queue, name)] = {"tag_filter": _listed(tag_filter),
                                          **({"single_active_consumer": True} if single else {})}
        elif existing_group.tag_filter == tag_filter and existing_group.single_active_consumer == single:
            plan.unchanged["groups"] += 1
        else:
            existing = {"tag_filter": _listed(existing_group.tag_filter),
                        "single_active_consumer": existing_group.single_active_consumer}
            plan.conflicts.append(f"{where}: group {name!r} on queue {queue!r} exists with other settings: "
                                  + _differences(existing, {"tag_filter": _listed(tag_filter),
                                                            "single_active_consumer": single}))

    by_name: dict[str, list[dict[str, Any]]] = {}
    for t in tokens:
        by_name.setdefault(t.name, []).append(_permission(t))
    for where, e in _entries(body, "permissions"):
        permission = _checked(where, e, lambda e=e: _parse_permission(e))
        name = permission["token"]
        if not _once(seen, where, ("token", canonical_json(permission)), True):
            continue
        if permission in by_name.get(name, []):
            plan.unchanged["permissions"] += 1
        elif name in by_name:
            plan.conflicts.append(f"{where}: token {name!r} exists with other permissions")
        else:  # token names need not be unique: each distinct entry is a token
            plan.tokens[canonical_json(permission)] = permission
    return plan


def _parse_permission(e: Mapping[str, Any]) -> dict[str, Any]:
    unknown = e.keys() - _TOKEN_FIELDS
    if unknown:
        raise InvalidInput(f"unknown fields: {', '.join(sorted(unknown))}")
    name = e.get("token")
    if type(name) is not str or not 1 <= len(name) <= _TOKEN_NAME_MAX:
        raise InvalidInput(f"token must be a name of 1-{_TOKEN_NAME_MAX} characters")
    is_admin = e.get("is_admin", False)
    if type(is_admin) is not bool:
        raise InvalidInput("is_admin must be true or false")
    permission: dict[str, Any] = {"token": name, "is_admin": is_admin}
    for action in ACTIONS:
        pattern = e.get(action, "")
        if type(pattern) is not str:
            raise InvalidInput(f"{action} must be a regular expression (a string)")
        try:
            compile_pattern(action, pattern)
        except InvalidPattern as exc:
            raise InvalidInput(str(exc)) from None
        permission[action] = pattern
    return permission


async def import_definitions(broker: Broker, body: Mapping[str, Any]) -> dict[str, Any]:
    """Check the whole document, then declare what is missing. Returns counts of what was created and
    what was already there, and the secrets of tokens created (shown only here)."""
    tokens = await asyncio.to_thread(broker.meta.list_tokens)
    plan = _plan(broker, body, tokens)
    if plan.conflicts:
        more = f" (and {len(plan.conflicts) - 3} more)" if len(plan.conflicts) > 3 else ""
        raise PreconditionFailed("; ".join(plan.conflicts[:3]) + more)
    for name, exchange in plan.exchanges.items():
        await broker.declare_exchange(name, exchange)
    for name, settings in plan.queues.items():
        await broker.declare_queue(name, settings)
    for binding in plan.bindings.values():
        await broker.bind(binding)
    for (queue, name), group in plan.groups.items():
        await broker.declare_group(queue, name, group)
    created_tokens = []
    for permission in plan.tokens.values():
        fields = {k: v for k, v in permission.items() if k != "token"}
        _, secret = await asyncio.to_thread(broker.meta.create_token, permission["token"], **fields)
        created_tokens.append({"token": permission["token"], "secret": secret})
    created = {"exchanges": len(plan.exchanges), "queues": len(plan.queues), "bindings": len(plan.bindings),
               "groups": len(plan.groups), "permissions": len(plan.tokens)}
    return {"created": created, "unchanged": plan.unchanged, "tokens": created_tokens}


def _listed(tag_filter: tuple[str, ...] | None) -> list[str] | None:
    return list(tag_filter) if tag_filter is not None else None


def _differences(existing: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    """The settings that differ, as JSON (as the file writes them): what exists, then what the file has."""
    keys = [k for k in existing if existing[k] != given.get(k)]
    return (f"{orjson.dumps({k: existing[k] for k in keys}).decode()} "
            f"(the file has {orjson.dumps({k: given.get(k) for k in keys}).decode()})")
