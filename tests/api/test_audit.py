"""The audit log over HTTP (app/api/audit.py): every state-changing route is recorded with who,
from where, what and how it ended, never a secret; `GET /api/v1/audit` reads it back (admins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from chunkmq.api.access import RULES
from chunkmq.api.audit import ACTIONS, NOT_AUDITED
from chunkmq.meta import MetaStore
from tests.server import ServerProcess

pytestmark = pytest.mark.anyio


async def _entries(api: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    r = await api.get("/audit", params=params)
    assert r.status_code == 200, r.text
    entries: list[dict[str, Any]] = r.json()["entries"]
    return entries


def test_every_route_that_changes_state_is_audited_or_named_as_the_data_path() -> None:
    changing = {key for key in RULES if key.split(" ", 1)[0] in ("POST", "PUT", "PATCH", "DELETE")}
    assert changing == set(ACTIONS) | NOT_AUDITED
    assert not set(ACTIONS) & NOT_AUDITED


async def test_changes_are_recorded_with_who_what_and_the_result(local_api: httpx.AsyncClient) -> None:
    assert (await local_api.put("/queues/orders", json={"max_deliveries": 3})).status_code == 201
    assert (await local_api.put("/queues/orders/groups/billing", json={})).status_code == 201
    assert (await local_api.post("/queues/orders/groups/billing/seek", json={"to": "latest"})).status_code == 200
    assert (await local_api.post("/queues/orders/purge")).status_code == 200
    assert (await local_api.delete("/queues/missing")).status_code == 404
    assert (await local_api.put("/queues/bad name!", json={})).status_code == 400
    assert (await local_api.post("/queues/orders/publish", json={"messages": [{"body": "x"}]})).status_code == 200
    assert (await local_api.get("/queues/orders")).status_code == 200
    entries = await _entries(local_api)
    got = [(e["action"], e["resource"], e["result"]) for e in entries]
    assert got == [("queue.declare", "bad name!", "invalid_name"), ("queue.delete", "missing", "queue_not_found"),
                   ("queue.purge", "orders", "ok"), ("group.seek", "orders/billing", "ok"),
                   ("group.declare", "orders/billing", "ok"), ("queue.declare", "orders", "ok")]  # no publish, no GET
    assert {(e["source"], e["who"], e["address"]) for e in entries} == {("api", "admin (bootstrap)", "127.0.0.1")}
    assert entries[0]["at"] >= entries[-1]["at"] > 1_700_000_000_000


async def test_a_creation_named_by_its_answer_records_its_id(local_api: httpx.AsyncClient) -> None:
    await local_api.put("/queues/q1", json={})
    await local_api.put("/exchanges/x1", json={"type": "fanout"})
    binding = (await local_api.post("/bindings", json={"exchange": "x1", "queue": "q1"})).json()
    rule = (await local_api.post("/alerts/rules", json={"kind": "disk", "threshold": 90})).json()
    entries = await _entries(local_api, action="binding")
    assert [(e["action"], e["resource"]) for e in entries] == [("binding.create", str(binding["id"]))]
    assert (await _entries(local_api, action="alert_rule"))[0]["resource"] == str(rule["id"])


async def test_refused_callers_are_recorded_and_secrets_are_not(local_api: httpx.AsyncClient) -> None:
    app = local_api.app  # type: ignore[attr-defined]
    with MetaStore(app.state.settings.meta_url) as meta:
        _, reader = meta.create_token("reader", read=".*")
    secret_body = {"queues": [{"name": "sekrit-q"}], "tokens": [{"name": "t", "token": "cmq_not_a_real_secret"}]}
    await local_api.put("/queues/q2", json={}, headers={"authorization": "Bearer cmq_wrong_token_value"})
    await local_api.put("/queues/q2", json={}, headers={"authorization": f"Bearer {reader}"})
    await local_api.post("/definitions", json=secret_body)
    entries = await _entries(local_api)
    assert [(e["who"], e["action"], e["result"]) for e in entries[1:]] == [
        ("reader", "queue.declare", "forbidden"), ("", "queue.declare", "unauthorized")]
    assert entries[0]["action"] == "definitions.import" and entries[0]["resource"] == ""
    text = str(entries)
    assert "cmq_wrong_token_value" not in text and reader not in text and "cmq_not_a_real_secret" not in text
    # and only an administrator reads the log
    r = await local_api.get("/audit", headers={"authorization": f"Bearer {reader}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_the_log_pages_by_cursor_and_filters(local_api: httpx.AsyncClient) -> None:
    for i in range(5):
        await local_api.put(f"/queues/p{i}", json={})
    await local_api.put("/exchanges/e1", json={"type": "direct"})
    first = (await local_api.get("/audit", params={"limit": 2, "action": "queue"})).json()
    assert [e["resource"] for e in first["entries"]] == ["p4", "p3"] and first["next_cursor"]
    second = (await local_api.get("/audit", params={"limit": 2, "action": "queue",
                                                     "cursor": first["next_cursor"]})).json()
    assert [e["resource"] for e in second["entries"]] == ["p2", "p1"]
    last = (await local_api.get("/audit", params={"limit": 2, "action": "queue",
                                                   "cursor": second["next_cursor"]})).json()
    assert [e["resource"] for e in last["entries"]] == ["p0"] and last["next_cursor"] is None
    at = first["entries"][0]["at"]
    assert [e["resource"] for e in await _entries(local_api, since=at, action="queue")] == ["p4"]
    assert await _entries(local_api, until=0) == []
    assert await _entries(local_api, who="somebody else") == []
    for bad in ({"limit": 0}, {"limit": 1001}, {"cursor": "x"}, {"since": -1}):
        r = await local_api.get("/audit", params=bad)
        assert r.status_code == 400 and r.json()["error"]["code"] in ("invalid_request", "invalid_body"), bad


def test_a_real_server_records_what_its_clients_change(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with httpx.Client(base_url=f"{server.url}/api/v1", timeout=30) as http:
            assert http.put("/exchanges/audited", json={"type": "topic"}).status_code == 201
            assert http.delete("/exchanges/audited").status_code == 204
            entries = http.get("/audit").json()["entries"]
    finally:
        server.stop()
    assert [(e["who"], e["action"], e["resource"], e["result"]) for e in entries] == [
        ("anonymous", "exchange.delete", "audited", "ok"), ("anonymous", "exchange.declare", "audited", "ok")]
