"""What each kind of rule measures, on a real broker in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.alerts.harness import T0, running, settings
from tests.mailbox import Mailbox

S = 1000


def firing(run: object, kind: str) -> dict[tuple[str, str], float]:
    return {(a.queue, a.group): a.value for a in run.alerts.firing() if a.kind == kind}  # type: ignore[attr-defined]


def test_queue_full_dead_letters_no_consumers_and_disk(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            await run.rule(kind="queue_full", threshold=80)
            await run.rule(kind="dead_letters", threshold=5, window_seconds=60)
            await run.rule(kind="no_consumers", queue="orphan", threshold=30)
            await run.rule(kind="disk", threshold=0.000001)
            await run.queue("bounded", max_messages=10)
            await run.publish("bounded", 9)  # 90 % of max_messages
            await run.queue("roomy", max_messages=100)
            await run.publish("roomy", 9)
            await run.queue("dlq")
            await run.queue("spill", max_messages=2, dead_letter_exchange="", dead_letter_routing_key="dlq")
            await run.queue("orphan", "g")
            await run.publish("orphan", 1)  # waits, and no consumer has ever pulled
            await run.queue("served", "g")
            await run.publish("served", 1)
            await run.pull("served", "g", 0 + 1)
            await run.tick(T0)
            await run.publish("spill", 8)  # 6 pushed out to dlq
            await run.tick(T0 + 31 * S)
            assert firing(run, "queue_full") == {("bounded", ""): 90.0, ("spill", ""): 100.0}
            assert firing(run, "dead_letters") == {("spill", ""): 6}
            assert firing(run, "no_consumers") == {("orphan", "g"): 31.0}
            assert list(firing(run, "disk")) == [("", "")]
            # the dead letters age out of the 60 s window
            await run.tick(T0 + 100 * S)
            assert firing(run, "dead_letters") == {}
            await asyncio.sleep(0.1)

    asyncio.run(scenario())
