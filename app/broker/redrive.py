"""Dead-letter redrive: move dead-lettered messages back to the queue they came from.

A dead-lettered message carries `x-death-queue` (and `x-death-reason`, `x-death-group`,
`x-original-offset`, `x-original-exchange`, `x-delivery-count`), added by BrokerBase.dead_letter.
Redrive reads a dead-letter queue from its first offset, republishes each message straight into
its `x-death-queue` with its own routing key, headers (less the dead-letter ones), tag and body,
then moves the dead-letter queue's floor past what it moved. It stops at the first message it cannot
move (no `x-death-queue`, or that queue is gone), so nothing is dropped without having been moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from chunkmq.broker.errors import InvalidInput

if TYPE_CHECKING:
    from chunkmq.broker.broker import Broker

DEATH_HEADERS = frozenset({
    "x-death-reason", "x-death-queue", "x-death-group", "x-original-offset", "x-original-exchange",
    "x-delivery-count",
})
_PAGE = 500


@dataclass(frozen=True, slots=True)
class RedriveResult:
    moved: int
    by_queue: dict[str, int]
    stopped_at: int | None  # the offset of a message that could not be moved, if any
    reason: str | None


def _republished(message: dict[str, Any]) -> dict[str, Any]:
    headers = {k: v for k, v in (message.get("headers") or {}).items() if k not in DEATH_HEADERS}
    out: dict[str, Any] = {"routing_key": message.get("routing_key", ""), "headers": headers}
    if message.get("tag"):
        out["tag"] = message["tag"]
    if "body_base64" in message:
        out["body_base64"] = message["body_base64"]
    else:
        out["body"] = message.get("body", "")
    return out


async def redrive(broker: Broker, queue_name: str, limit: int = 10_000) -> RedriveResult:
    """Move up to `limit` dead-lettered messages of `queue_name` back where they came from."""
    if limit < 1:
        raise InvalidInput("limit must be at least 1")
    dlq = broker.queue(queue_name)
    offset = broker.store.first_offset(dlq.id)
    moved, by_queue = 0, {}
    stopped_at: int | None = None
    reason: str | None = None
    while moved < limit and stopped_at is None:
        page = orjson.loads(broker.browse(queue_name, offset, None, min(_PAGE, limit - moved)))
        messages = page["messages"]
        if not messages:
            break
        runs: list[tuple[str, list[dict[str, Any]]]] = []  # consecutive messages with one target
        for message in messages:
            target = (message.get("headers") or {}).get("x-death-queue")
            if not target:
                stopped_at, reason = message["offset"], "it has no x-death-queue header"
            elif target == queue_name or target not in broker.queues:
                stopped_at, reason = message["offset"], f"its queue {target!r} does not exist"
            if stopped_at is not None:
                break
            if runs and runs[-1][0] == target:
                runs[-1][1].append(message)
            else:
                runs.append((target, [message]))
        for target, run in runs:
            # One batch per run: stored entirely or not at all, and in the original order.
            await broker.publish("", [_republished(m) for m in run], queue_name=target)
            moved += len(run)
            by_queue[target] = by_queue.get(target, 0) + len(run)
            offset = run[-1]["offset"] + 1
            broker.store.set_first_offset(dlq.id, offset, durable=True)
    return RedriveResult(moved, by_queue, stopped_at, reason)
