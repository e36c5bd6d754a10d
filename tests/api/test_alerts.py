"""/api/v1/alerts: a real server process mailing a real SMTP server; the routes' rules and errors."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx

from chunkmq.meta import MetaStore
from tests.alerts.harness import running, settings
from tests.api.client import error, ok
from tests.mailbox import Mailbox
from tests.server import ServerProcess


def alerting_server(data_dir: Path, mailbox: Mailbox) -> ServerProcess:
    return ServerProcess(
        data_dir, CHUNKMQ_AUTH="off", CHUNKMQ_SMTP_HOST="127.0.0.1", CHUNKMQ_SMTP_PORT=str(mailbox.port),
        CHUNKMQ_SMTP_TO="ops@example.com", CHUNKMQ_ALERT_INTERVAL_SECONDS="0.2",
        CHUNKMQ_ALERT_DIGEST_SECONDS="0.2", CHUNKMQ_HISTORY_INTERVAL_SECONDS="0.2",
        CHUNKMQ_CONSOLE_URL="http://console.example:8080",
    )


def test_a_stopped_consumer_fires_one_mail_that_survives_a_restart_and_resuming_resolves_it(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    server = alerting_server(tmp_path / "data", mailbox).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            rule = ok(api.post("/api/v1/alerts/rules", json={
                "kind": "lag_messages", "queue": "orders", "group": "billing", "threshold": 20, "for_seconds": 1}), 201)
            ok(api.put("/api/v1/queues/orders"), 201)
            ok(api.put("/api/v1/queues/orders/groups/billing", json={"start": "earliest"}), 201)
            pull = {"max_messages": 100, "consumer": "worker-1"}
            ok(api.post("/api/v1/queues/orders/publish", json={"messages": [{"body": "x"}] * 5}))
            ok(api.post("/api/v1/queues/orders/groups/billing/pull", json=pull))
            ok(api.post("/api/v1/queues/orders/groups/billing/ack", json={"up_to": 5}))
            # The consumer stops; 30 messages pile up.
            published = time.monotonic()
            ok(api.post("/api/v1/queues/orders/publish", json={"messages": [{"body": "x"}] * 30}))
            [fired] = mailbox.wait_for(1, timeout=15)
            assert time.monotonic() - published >= 1.0  # not before the `for` duration
            assert fired.recipients == ["ops@example.com"]
            assert fired.subject == ("[chunkmq] FIRING lag_messages orders/billing: "
                                     "group lag: 30 messages, threshold 20 messages")
            text, html = fired.part("plain"), fired.part("html")
            assert "queue: orders   group: billing" in text
            assert "consumers online: 1" in text
            age = re.search(r"lag: 30 messages, oldest unacked ([\d.]+) s", text)
            assert age is not None and float(age.group(1)) >= 1.0
            assert "\n  http://console.example:8080/queues/orders\n" in text
            assert '<a href="http://console.example:8080/queues/orders">orders</a>' in html
            assert '<a href="http://console.example:8080/queues/orders">billing</a>' in html
            assert 'href="http://console.example:8080/alerts"' in html
            [current] = ok(api.get("/api/v1/alerts"))["alerts"]
            assert (current["rule_id"], current["state"], current["value"]) == (rule["id"], "firing", 30)

            server.restart()  # the alert is still firing afterwards, and does not mail again
            time.sleep(1.5)
            [after] = ok(api.get("/api/v1/alerts"))["alerts"]
            assert (after["state"], after["fired_at"]) == ("firing", current["fired_at"])
            assert len(mailbox.received) == 1

            # The consumer resumes and catches up: exactly one RESOLVED mail.
            got = ok(api.post("/api/v1/queues/orders/groups/billing/pull", json=pull))["messages"]
            ok(api.post("/api/v1/queues/orders/groups/billing/ack", json={"up_to": got[-1]["offset"] + 1}))
            resolved = mailbox.wait_for(2, timeout=15)[1]
            assert resolved.subject.startswith("[chunkmq] RESOLVED lag_messages orders/billing: group lag: 0 messages")
            time.sleep(1.0)
            assert len(mailbox.received) == 2
            transitions = ok(api.get("/api/v1/alerts/events", params={"rule": rule["id"]}))
            assert [(e["type"], e["state"]) for e in reversed(transitions)] == [
                ("transition", "pending"), ("transition", "firing"), ("mail", "sent"),
                ("transition", "resolved"), ("mail", "sent")]
            assert [e["state"] for e in ok(api.get("/api/v1/alerts/events", params={"state": "firing"}))] == ["firing"]
            since = transitions[0]["at"]
            assert [e["state"] for e in ok(api.get("/api/v1/alerts/events", params={"since": since}))] == ["sent"]
    finally:
        server.stop()


def test_alerts_that_fired_without_smtp_are_mailed_once_smtp_is_configured_and_the_broker_restarts(
    tmp_path: Path, mailbox: Mailbox
) -> None:
    server = alerting_server(tmp_path / "data", mailbox)
    smtp = {k: server.env.pop(k) for k in ("CHUNKMQ_SMTP_HOST", "CHUNKMQ_SMTP_PORT", "CHUNKMQ_SMTP_TO")}
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            for rule in ok(api.get("/api/v1/alerts/rules")):
                ok(api.delete(f"/api/v1/alerts/rules/{rule['id']}"), 204)
            ok(api.post("/api/v1/alerts/rules", json={"kind": "lag_messages", "threshold": 5}), 201)
            for q in ("a", "b", "c"):
                ok(api.put(f"/api/v1/queues/{q}"), 201)
                ok(api.put(f"/api/v1/queues/{q}/groups/g", json={"start": "earliest"}), 201)
                ok(api.post(f"/api/v1/queues/{q}/publish", json={"messages": [{"body": "x"}] * 10}))
            deadline = time.monotonic() + 15
            while len(ok(api.get("/api/v1/alerts", params={"state": "firing"}))["alerts"]) < 3:
                assert time.monotonic() < deadline, "the alerts did not fire"
                time.sleep(0.1)
            fired = {a["queue"]: a["fired_at"] for a in ok(api.get("/api/v1/alerts"))["alerts"]}

            server.stop()
            server.env.update(smtp)  # the operator configures SMTP and restarts
            server.start()
            [digest] = mailbox.wait_for(1, timeout=15)  # one mail for the three, not a storm
            assert digest.subject == "[chunkmq] 3 alerts: 3 firing"
            for q in ("a", "b", "c"):
                assert f"FIRING lag_messages {q}/g" in digest.part("plain")
            time.sleep(1.5)
            server.restart()  # once per alert: neither later evaluations nor a restart mail it again
            time.sleep(1.5)
            assert len(mailbox.received) == 1
            assert {a["queue"]: a["fired_at"] for a in ok(api.get("/api/v1/alerts"))["alerts"]} == fired
            mails = ok(api.get("/api/v1/alerts/events", params={"state": "sent"}))
            assert sorted((e["queue"], e["previous"]) for e in mails) == [
                ("a", "firing"), ("b", "firing"), ("c", "firing")]
            assert all(e["detail"].endswith("250 2.0.0 queued (digest of 3)") for e in mails)
    finally:
        server.stop()


def test_rules_are_listed_created_replaced_and_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", 25), clear_rules=False) as run:
            defaults = await run.call("GET", "/api/v1/alerts/rules")
            assert [(r["kind"], r["threshold"], r["for_seconds"]) for r in defaults] == [
                ("lag_messages", 100_000, 300), ("stalled", 300, 0)]
            body = {"kind": "lag_seconds", "queue": "orders.*", "group": "b?", "threshold": 30, "for_seconds": 60,
                    "renotify_seconds": 0, "recipients": ["a@example.com", "b@example.com"], "enabled": False}
            r = await run.http.put("/api/v1/alerts/rules/7", json=body)
            assert r.status_code == 201
            assert {k: r.json()[k] for k in body} == body and r.json()["id"] == 7
            r = await run.http.put("/api/v1/alerts/rules/7", json={**body, "threshold": 40})
            assert r.status_code == 200 and r.json()["threshold"] == 40
            assert (await run.call("GET", "/api/v1/alerts/rules/7"))["renotify_seconds"] == 0
            assert [r["id"] for r in await run.call("GET", "/api/v1/alerts/rules")] == [1, 2, 7]
            assert (await run.http.delete("/api/v1/alerts/rules/7")).status_code == 204
            for response in (await run.http.get("/api/v1/alerts/rules/7"),
                             await run.http.delete("/api/v1/alerts/rules/7")):
                assert response.status_code == 404 and response.json()["error"]["code"] == "rule_not_found"

    asyncio.run(scenario())


def test_bad_rules_are_refused_with_the_error_shape(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", 25)) as run:
            for body in ({"kind": "lag", "threshold": 1}, {"kind": "lag_messages"},
                         {"kind": "lag_messages", "threshold": -1}, {"kind": "lag_messages", "threshold": 1, "x": 1},
                         {"kind": "lag_messages", "threshold": 1, "queue": "a/b"},
                         {"kind": "lag_messages", "threshold": 1, "recipients": ["nobody"]},
                         {"kind": "lag_messages", "threshold": 1, "for_seconds": "soon"}):
                r = await run.http.post("/api/v1/alerts/rules", json=body)
                assert r.status_code == 400, (body, r.text)
                assert r.json()["error"]["code"] == "invalid_body" and r.json()["error"]["message"]
            r = await run.http.post("/api/v1/alerts/rules", content=b"{not json")
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body"
            for rule_id in ("0", "99999999999999999999999", "x"):
                r = await run.http.put(f"/api/v1/alerts/rules/{rule_id}", json={"kind": "disk", "threshold": 90})
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
                r = await run.http.delete(f"/api/v1/alerts/rules/{rule_id}")
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
            for params in ({"state": "exploded"}, {"since": "37107676498866307072"}, {"rule": str(2**63)}):
                r = await run.http.get("/api/v1/alerts/events", params=params)
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", params

    asyncio.run(scenario())


def test_changing_rules_needs_an_admin_token(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = settings(tmp_path / "data", 25, auth="on")
        async with running(config, clear_rules=False) as run:
            admin = (config.data_dir / "admin-token").read_text().strip()
            with MetaStore(config.meta_url) as meta:
                _, reader = meta.create_token("reader", configure=".*", read=".*")
            rule = {"kind": "disk", "threshold": 90}
            assert (await run.http.get("/api/v1/alerts/rules")).status_code == 401
            as_reader = {"authorization": f"Bearer {reader}"}
            assert (await run.http.get("/api/v1/alerts/rules", headers=as_reader)).status_code == 200
            for method, path, body in (("POST", "/api/v1/alerts/rules", rule), ("PUT", "/api/v1/alerts/rules/9", rule),
                                       ("DELETE", "/api/v1/alerts/rules/1", None),
                                       ("POST", "/api/v1/alerts/test-email", {}),
                                       ("GET", "/api/v1/alerts/settings", None)):
                r = await run.http.request(method, path, json=body, headers=as_reader)
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (method, path)
            r = await run.http.put("/api/v1/alerts/rules/9", json=rule, headers={"authorization": f"Bearer {admin}"})
            assert r.status_code == 201

    asyncio.run(scenario())


def test_error_helper_shapes(tmp_path: Path) -> None:
    """The helpers of tests/api/client.py work on these routes as on the others."""
    async def scenario() -> None:
        async with running(settings(tmp_path / "data", 25)) as run:
            r = await run.http.get("/api/v1/alerts/rules/12345")
            assert "12345" in error(httpx.Response(r.status_code, content=r.content), 404, "rule_not_found")

    asyncio.run(scenario())
