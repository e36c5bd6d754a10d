"""The `time_to_clear` alert rule over the real app in-process and a real SMTP server: it fires when
the estimate (app/broker/clearing.py) passes the threshold, and when the lag has not fallen for the
rule's window, and it resolves once the lag is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from chunkmq.alerts.rules import NEVER
from tests.alerts.harness import T0, running, settings
from tests.mailbox import Mailbox

S = 1000  # ms
# The harness samples once an hour (the tests sample by hand): keep a day of samples in memory, as a
# server keeps the last 15 minutes, so the estimate sees every sample a test takes.
KEEP = {"history_memory_seconds": 86400, "history_fine_seconds": 86400}


def test_a_slow_drain_fires_with_its_estimate_and_resolves_once_clear(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, **KEEP)) as run:
            await run.rule(kind="time_to_clear", queue="slow", threshold=600, window_seconds=60)
            await run.queue("slow", "g")
            await run.publish("slow", 1000)
            await run.pull("slow", "g")
            await run.tick(T0)
            assert run.firing() == []  # one sample: no estimate yet
            await run.ack("slow", "g", 100)  # 100 in 50 s: 2 a second, 900 left: 450 s
            await run.tick(T0 + 50 * S)
            group = await run.call("GET", "/api/v1/queues/slow/groups/g")
            assert (group["clearing"], group["lag_trend"], group["time_to_clear_seconds"]) == ("clearing", -2.0, 450.0)
            assert run.firing() == [] and mailbox.received == []  # under 600 s
            await run.ack("slow", "g", 110)  # 110 in 100 s: 1.1 a second, 890 left: about 809 s
            await run.tick(T0 + 100 * S)
            assert run.firing() == [("time_to_clear", "slow", "g")]
            mail = (await mailbox.arrived(1))[0]
            assert mail.subject.startswith("[chunkmq] FIRING time_to_clear slow/g")
            assert "time to clear the lag: 809.1 s" in mail.part("plain"), mail.part("plain")
            await run.ack("slow", "g", 1000)
            await run.tick(T0 + 110 * S)
            assert run.firing() == []
            mails = await mailbox.arrived(2)
            assert mails[1].subject.startswith("[chunkmq] RESOLVED time_to_clear slow/g")

    asyncio.run(scenario())


def test_a_lag_that_does_not_fall_for_the_window_fires_when_due(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, **KEEP)) as run:
            await run.rule(kind="time_to_clear", queue="grow", threshold=86400, window_seconds=60)
            await run.queue("grow", "g")
            await run.publish("grow", 10)
            await run.tick(T0)
            await run.publish("grow", 10)
            await run.tick(T0 + 30 * S)
            group = await run.call("GET", "/api/v1/queues/grow/groups/g")
            assert (group["clearing"], group["time_to_clear_seconds"]) == ("growing", None)
            await run.tick(T0 + 60 * S)  # growing for 30 s of the rule's 60
            assert run.firing() == []
            # Nothing changes from here on: the queue is looked at again when the window may be over.
            await run.tick(T0 + 89 * S)
            assert run.firing() == []
            await run.tick(T0 + 121 * S)
            assert run.firing() == [("time_to_clear", "grow", "g")]
            assert [a.value for a in run.alerts.firing()] == [NEVER]
            mail = (await mailbox.arrived(1))[0]
            assert mail.subject.startswith("[chunkmq] FIRING time_to_clear grow/g")
            assert "time to clear the lag: never (the lag has not fallen for 60 s), threshold 86,400 s" in \
                mail.part("plain"), mail.part("plain")

    asyncio.run(scenario())
