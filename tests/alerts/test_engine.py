"""The alert engine over the real app in-process and a real SMTP server, with the clock in the test's
hands: hysteresis, digests, `stalled`, state across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from chunkmq.broker.base import now_ms
from chunkmq.meta.alerts import NewAlertEvent
from tests.alerts.harness import T0, running, settings
from tests.mailbox import Mailbox

S = 1000  # ms


def test_hovering_at_the_threshold_sends_no_more_mails(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            await run.rule(kind="lag_messages", queue="hover", threshold=100, for_seconds=30)
            await run.queue("hover", "g")
            await run.publish("hover", 100)
            await run.pull("hover", "g")
            await run.tick(T0)
            assert run.firing() == [] and mailbox.received == []  # pending: not yet 30 s
            await run.tick(T0 + 31 * S)
            assert run.firing() == [("lag_messages", "hover", "g")]
            assert len(mailbox.received) == 1
            # Hover between 92 and 108 for ten minutes: above the resolve line (90), so it keeps firing.
            floor, end, t = 0, 100, T0 + 31 * S
            for _ in range(30):
                floor = end - 92
                await run.ack("hover", "g", floor)
                t += 10 * S
                await run.tick(t)
                await run.publish("hover", 16)
                end += 16
                await run.pull("hover", "g")
                t += 10 * S
                await run.tick(t)
            assert run.firing() == [("lag_messages", "hover", "g")]
            assert len(mailbox.received) == 1
            # Below 90 % of the threshold: resolved only once that held for `for` (30 s).
            await run.ack("hover", "g", end - 50)
            await run.tick(t + 10 * S)
            await run.tick(t + 39 * S)
            assert len(mailbox.received) == 1
            await run.tick(t + 41 * S)
            mails = await mailbox.arrived(2)
            assert run.firing() == []
            assert mails[1].subject.startswith("[chunkmq] RESOLVED lag_messages hover/g")
            # Hovering just under the threshold after that (91..99) never goes pending, so no mail.
            floor = end - 50
            await run.publish("hover", 45)
            end += 45
            await run.pull("hover", "g")
            for i in range(10):
                floor = end - 91
                await run.ack("hover", "g", floor)
                await run.tick(t + (50 + i * 20) * S)
                await run.publish("hover", 8)
                end += 8
                await run.pull("hover", "g")
                await run.tick(t + (60 + i * 20) * S)
            await asyncio.sleep(0.2)
            assert len(mailbox.received) == 2
            states = [(e.previous, e.state) for e in run.events() if e.type == "transition"]
            assert states == [("ok", "pending"), ("pending", "firing"), ("firing", "resolved")]

    asyncio.run(scenario())


def test_fifty_queues_breaching_at_once_send_one_digest(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            await run.rule(kind="lag_messages", queue="burst-*", threshold=3)
            names = [f"burst-{i:02d}" for i in range(50)]
            for name in names:
                await run.queue(name, "g")
                await run.publish(name, 3)
            await run.queue("other", "g")  # outside the rule's glob
            await run.publish("other", 10)
            await run.tick(T0)
            assert len(run.firing()) == 50
            await asyncio.sleep(0.3)
            [mail] = mailbox.received
            assert mail.subject == "[chunkmq] 50 alerts: 50 firing"
            assert mail.recipients == ["ops@example.com"]
            text = mail.part("plain")
            assert all(f"queue: {name}   group: g" in text for name in names)
            assert "other" not in text
            sent = run.events(state="sent")
            assert len(sent) == 50 and all("(digest of 50)" in e.detail for e in sent)

    asyncio.run(scenario())


def test_alerts_firing_within_the_digest_window_share_one_mail(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, alert_digest_seconds=1.0)) as run:
            await run.rule(kind="lag_messages", queue="w-*", threshold=1)
            await run.queue("w-1", "g")
            await run.queue("w-2", "g")
            await run.publish("w-1", 1)
            await run.alerts.engine.evaluate(T0)  # w-1 fires; the outbox waits for the window
            await asyncio.sleep(0.3)
            await run.publish("w-2", 1)
            await run.alerts.engine.evaluate(T0 + 300)
            [mail] = await mailbox.arrived(1, timeout=5)
            assert mail.subject == "[chunkmq] 2 alerts: 2 firing"
            await asyncio.sleep(1.2)
            assert len(mailbox.received) == 1

    asyncio.run(scenario())


def test_stalled_fires_when_acks_stop_while_messages_wait_not_when_idle(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            await run.rule(kind="stalled", threshold=60)
            for name in ("stuck", "idle", "busy"):
                await run.queue(name, "g")
                await run.publish(name, 20)
                await run.pull(name, "g")
            await run.ack("idle", "g", 20)  # all done: nothing waits
            for step in range(8):  # 8 x 15 s, firing at the 5th (60 s): stuck never acks, busy acks one each step
                await run.ack("busy", "g", step + 1)
                await run.tick(T0 + step * 15 * S)
            assert run.firing() == [("stalled", "stuck", "g")]
            [mail] = mailbox.received
            assert mail.subject.startswith("[chunkmq] FIRING stalled stuck/g: "
                                           "ack floor not moving: 60 s, threshold 60 s")
            assert "lag: 20 messages" in mail.part("plain")
            await run.tick(T0 + 9 * 15 * S)
            assert len(mailbox.received) == 1  # still firing: no second mail
            # The stuck consumer acks everything: nothing waits any more, so it is over.
            await run.ack("stuck", "g", 20)
            await run.tick(T0 + 10 * 15 * S)
            assert run.firing() == []
            assert (await mailbox.arrived(2))[1].subject.startswith("[chunkmq] RESOLVED stalled stuck/g")

    asyncio.run(scenario())


def test_a_firing_alert_survives_a_restart_without_mailing_again(
    tmp_path: Path, mailbox: Mailbox, database_url: str
) -> None:
    async def scenario() -> None:
        config = settings(tmp_path / "data", mailbox.port, database_url=database_url)
        async with running(config) as run:
            await run.rule(kind="lag_messages", threshold=5, for_seconds=10)
            await run.queue("kept", "g")
            await run.publish("kept", 10)
            await run.tick(T0)
            await run.tick(T0 + 11 * S)
            assert run.firing() == [("lag_messages", "kept", "g")]
            fired_at = run.alerts.firing()[0].fired_at_ms
        assert len(mailbox.received) == 1
        async with running(config, clear_rules=False) as run:
            current = run.alerts.engine.current()
            assert [(a.queue, a.state, a.fired_at_ms) for a in current] == [("kept", "firing", fired_at)]
            for i in range(5):
                await run.tick(T0 + (20 + i * 10) * S)
            assert run.firing() == [("lag_messages", "kept", "g")]
            await asyncio.sleep(0.2)
            assert len(mailbox.received) == 1
            await run.pull("kept", "g")
            await run.ack("kept", "g", 10)
            await run.tick(T0 + 100 * S)
            await run.tick(T0 + 111 * S)
            assert (await mailbox.arrived(2))[1].subject.startswith("[chunkmq] RESOLVED")

    asyncio.run(scenario())


def test_history_older_than_the_kept_days_is_deleted(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port, alert_history_days=2)) as run:
            day = 86_400 * S
            await run.alerts.record([NewAlertEvent(T0 - 3 * day, "mail", "sent", "test"),
                                     NewAlertEvent(T0 - day, "mail", "failed", "test")])
            await run.alerts.engine.evaluate(T0)
            assert [e.state for e in run.events()] == ["failed"]

    asyncio.run(scenario())


def test_a_deleted_queue_resolves_its_alert_and_a_deleted_rule_drops_its_alerts(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            rule = await run.rule(kind="lag_messages", threshold=1)
            await run.queue("doomed", "g")
            await run.queue("kept", "g")
            await run.publish("doomed", 2)
            await run.publish("kept", 2)
            await run.tick(T0)
            assert len(run.firing()) == 2
            await run.call("DELETE", "/api/v1/queues/doomed?force=true", status=204)
            await run.tick(T0 + S)
            assert run.firing() == [("lag_messages", "kept", "g")]
            resolved = [e for e in run.events(state="resolved")]
            assert [(e.queue, e.detail) for e in resolved] == [("doomed", "the queue or group is gone")]
            await run.call("DELETE", f"/api/v1/alerts/rules/{rule}", status=204)
            await run.tick(T0 + 2 * S)
            assert run.firing() == []
            assert run.alerts.repo.load_states() == []
            # 2 FIRING in one digest, then the RESOLVED of the deleted queue; no mail for the deleted rule
            assert [m.subject.split(":")[0] for m in mailbox.received] == [
                "[chunkmq] 2 alerts", "[chunkmq] RESOLVED lag_messages doomed/g"]

    asyncio.run(scenario())


def test_an_age_rule_fires_on_a_queue_that_does_not_change_when_due_and_resolves(tmp_path: Path,
                                                                                mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            engine = run.alerts.engine
            await run.rule(kind="lag_seconds", queue="*", threshold=60)
            await run.queue("aged", "g")
            for i in range(20):
                await run.queue(f"idle-{i}", "g")
            await run.publish("aged", 1)
            t = now_ms()  # the message is younger than this
            await run.tick(t)  # the first round looks at every queue
            assert engine.looked == 21 and run.firing() == []
            for seconds in (5, 30, 59):  # nothing changed and nothing is due: no queue is looked at
                await run.tick(t + seconds * S)
                assert engine.looked == 21 and run.firing() == []
            await run.tick(t + 61 * S)  # the message is 60 s old: "aged" is due, alone
            assert engine.looked == 22
            assert run.firing() == [("lag_seconds", "aged", "g")]
            mails = await mailbox.arrived(1)
            assert mails[0].subject.startswith("[chunkmq] FIRING lag_seconds aged/g")
            await run.tick(t + 70 * S)  # a firing alert's queue is looked at every round
            assert engine.looked == 23
            assert await run.pull("aged", "g") == [0]
            await run.ack("aged", "g", 1)
            await run.tick(t + 75 * S)
            assert run.firing() == []
            mails = await mailbox.arrived(2)
            assert mails[1].subject.startswith("[chunkmq] RESOLVED lag_seconds aged/g")
            looked = engine.looked
            await run.tick(t + 3600 * S)  # resolved and empty: nothing grows any more
            assert engine.looked == looked
            states = [(e.previous, e.state) for e in run.events() if e.type == "transition"]
            assert states == [("ok", "pending"), ("pending", "firing"), ("firing", "resolved")]

    asyncio.run(scenario())


def test_a_queue_whose_settings_change_is_measured_again(tmp_path: Path, mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            await run.rule(kind="queue_full", queue="*", threshold=50)
            await run.queue("capped", "g", max_messages=100)
            await run.publish("capped", 40)
            await run.tick(T0)
            assert run.firing() == []
            looked = run.alerts.engine.looked
            await run.tick(T0 + 5 * S)
            assert run.alerts.engine.looked == looked  # nothing changed
            await run.call("PATCH", "/api/v1/queues/capped", json={"max_messages": 60})  # 40 of 60: 67%
            await run.tick(T0 + 10 * S)
            assert run.alerts.engine.looked == looked + 1
            assert run.firing() == [("queue_full", "capped", "")]

    asyncio.run(scenario())


def test_stalled_and_no_consumers_fire_on_a_queue_that_does_not_change_when_due(tmp_path: Path,
                                                                               mailbox: Mailbox) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", mailbox.port)) as run:
            engine = run.alerts.engine
            await run.rule(kind="stalled", queue="st", threshold=60)
            await run.rule(kind="no_consumers", queue="st", threshold=120)
            await run.queue("st", "g")
            for i in range(10):
                await run.queue(f"idle-{i}", "g")
            await run.publish("st", 2)  # waiting, never pulled: the floor stands and nobody is seen
            await run.tick(T0)
            assert engine.looked == 11
            await run.tick(T0 + 59 * S)
            assert engine.looked == 11 and run.firing() == []
            await run.tick(T0 + 61 * S)  # the floor has stood for 60 s: due, alone
            assert engine.looked == 12 and run.firing() == [("stalled", "st", "g")]
            await run.tick(T0 + 119 * S)
            assert run.firing() == [("stalled", "st", "g")]
            await run.tick(T0 + 121 * S)
            assert sorted(run.firing()) == [("no_consumers", "st", "g"), ("stalled", "st", "g")]
            assert await run.pull("st", "g") == [0, 1]
            await run.ack("st", "g", 2)
            await run.tick(T0 + 125 * S)
            assert run.firing() == []
            resolved = [e for e in run.events() if e.type == "transition" and e.state == "resolved"]
            assert sorted(e.kind for e in resolved) == ["no_consumers", "stalled"]

    asyncio.run(scenario())
