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


def test_a_queue_without_consumer_groups_filling_up_fires_the_default_rules(tmp_path: Path, mailbox: Mailbox) -> None:
    """Nobody reads a queue without groups: every message in it waits. The group kinds watch it as
    group "", so the default `stalled` rule of a new install covers it, and `lag_messages` counts it."""
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port), clear_rules=False) as run:
            await run.queue("nobody")
            await run.publish("nobody", 3)
            await run.queue("empty")
            await run.tick(T0)
            assert run.firing() == []  # the default stalled rule: once messages waited 300 s
            await run.tick(T0 + 301 * S)
            assert run.firing() == [("stalled", "nobody", "")]
            [mail] = await mailbox.arrived(1)
            assert mail.subject == ("[chunkmq] FIRING stalled nobody (no consumer group): "
                                    "ack floor not moving: 301 s, threshold 300 s")
            assert "lag: 3 messages" in mail.part("plain")
            await run.rule(kind="lag_messages", queue="nobody", threshold=3)
            await run.rule(kind="no_consumers", queue="nobody", threshold=60)
            await run.publish("empty", 1)  # empty until now: its clock starts now, not when it was declared
            await run.tick(T0 + 302 * S)
            assert firing(run, "stalled") == {("nobody", ""): 302}
            assert firing(run, "lag_messages") == {("nobody", ""): 3}
            assert firing(run, "no_consumers") == {("nobody", ""): 302}
            # A consumer group comes: the queue's own alerts are over, the group's are its own.
            await run.call("PUT", "/api/v1/queues/nobody/groups/g", json={"start": "earliest"})
            await run.tick(T0 + 303 * S)
            assert ("lag_messages", "nobody", "g") in run.firing()
            assert [a for a in run.firing() if a[2] == ""] == []
            resolved = {(e.kind, e.detail) for e in run.events(state="resolved") if e.group == ""}
            assert resolved == {(kind, "the queue has a consumer group now")
                                for kind in ("stalled", "lag_messages", "no_consumers")}

    asyncio.run(scenario())
