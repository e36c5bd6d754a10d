"""Every console action: CSRF enforced, confirmation for destructive ones, outcome flashed."""

from __future__ import annotations

import orjson
import pytest
from fastapi import FastAPI

from tests.web.conftest import Console

pytestmark = pytest.mark.anyio

ACTIONS = [
    "/exchanges", "/exchanges/ex/delete", "/bindings", "/bindings/1/delete", "/queues", "/queues/q/settings",
    "/queues/q/visibility", "/queues/q/publish", "/queues/q/purge", "/queues/q/delete", "/queues/q/redrive",
    "/queues/q/seek", "/queues/q/groups/g/delete", "/queues/q/groups/g/pause", "/queues/q/groups/g/resume",
    "/access/tokens", "/access/tokens/1/delete", "/access/users",
    "/access/users/admin/delete", "/access/password", "/definitions", "/logout",
]


@pytest.mark.parametrize("url", ACTIONS)
async def test_every_action_refuses_a_missing_or_wrong_csrf_token(app: FastAPI, console: Console, url: str) -> None:
    broker = app.state.broker
    await broker.declare_exchange("ex", {"type": "direct"})
    await broker.declare_queue("q", {})
    await console.get("/")
    for data in ({}, {"csrf": "forged", "name": "new", "confirm": "yes", "force": "yes"}):
        response = await console.client.post(url, data=data)
        assert response.status_code == 403, url
        assert response.template == "error.html" and "did not come from this console" in response.context["message"]
    assert "ex" in broker.routing.exchanges and "q" in broker.queues and "new" not in broker.queues


@pytest.mark.parametrize("url", [*ACTIONS, "/login"])
async def test_every_action_refuses_another_site_even_with_a_valid_csrf_token(
        app: FastAPI, console: Console, url: str) -> None:
    broker = app.state.broker
    await console.get("/")
    data = {"csrf": console.csrf, "name": "new", "type": "direct", "confirm": "yes", "force": "yes"}
    for headers in ({"origin": "http://evil.example.com"}, {"origin": "null"}, {"sec-fetch-site": "cross-site"},
                    {"sec-fetch-site": "same-site", "origin": "http://console"}):
        response = await console.client.post(url, data=data, headers=headers)
        assert response.status_code == 403, (url, headers, response.text)
        assert response.template == "error.html" and "did not come from this console" in response.context["message"]
    assert "new" not in broker.queues and "new" not in broker.routing.exchanges
    same = await console.client.post("/exchanges", data=data, headers={
        "origin": "http://console", "sec-fetch-site": "same-origin"})
    assert same.status_code == 303 and "new" in broker.routing.exchanges


@pytest.mark.parametrize("url", ACTIONS)
async def test_every_action_needs_a_login(app: FastAPI, url: str) -> None:
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as anon:
        response = await anon.post(url, data={"csrf": "x"})
        assert response.status_code == 303 and response.headers["location"] == "/login"


async def test_exchanges_declare_bind_unbind_delete(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    assert "declared" in await console.act("/exchanges", {"name": "orders", "type": "topic"})
    assert broker.routing.exchanges["orders"].type.value == "topic"
    flash = await console.act("/exchanges", {"name": "orders", "type": "fanout"})
    assert "exists with other settings" in flash  # the broker's own message
    assert "invalid" in (await console.act("/exchanges", {"name": "bad/name", "type": "direct"})).lower()
    await broker.declare_queue("eu", {})
    flash = await console.act("/bindings", {"exchange": "orders", "queue": "eu", "routing_key": "eu.*",
                                            "back": "/exchanges/orders"})
    assert "bound" in flash
    [binding] = broker.bindings(exchange="orders")
    assert (binding.queue, binding.routing_key) == ("eu", "eu.*")
    assert "not valid JSON" in await console.act("/bindings", {"exchange": "orders", "queue": "eu", "arguments": "{"})
    page = await console.get("/exchanges/orders")
    assert [(b.id, b.routing_key) for b in page.context["bindings"]] == [(binding.id, "eu.*")]
    assert f'action="/bindings/{binding.id}/delete"' in page.text  # the form that unbinds is offered
    assert "unconfirmed" not in await console.act("/exchanges/orders/delete", {})
    assert "orders" in broker.routing.exchanges  # the confirmation box was not ticked
    flash = await console.act("/exchanges/orders/delete", {"confirm": "yes", "if_unused": "yes"})
    assert "has 1 bindings" in flash and "orders" in broker.routing.exchanges
    assert "removed" in await console.act(f"/bindings/{binding.id}/delete", {"back": "/exchanges/orders"})
    assert broker.bindings(exchange="orders") == []
    assert "deleted" in await console.act("/exchanges/orders/delete", {"confirm": "yes"})
    assert "orders" not in broker.routing.exchanges


async def test_queue_declare_settings_retire_publish_purge_delete(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    response = await console.post("/queues", {"name": "jobs", "max_messages": "100", "overflow": "reject_publish"})
    assert response.headers["location"] == "/queues/jobs"
    queue = broker.queues["jobs"]
    assert queue.settings.max_messages == 100 and queue.settings.overflow.value == "reject_publish"
    assert "Max messages: must be 1 or more" in await console.act("/queues/jobs/settings", {"max_messages": "-1"})
    assert "whole number" in await console.act("/queues/jobs/settings", {"max_messages": "lots"})
    assert "saved" in await console.act("/queues/jobs/settings", {"max_messages": "", "max_age_seconds": "60",
                                                                   "overflow": "drop_head"})
    assert queue.settings.max_messages is None and queue.settings.max_age_seconds == 60

    flash = await console.act("/queues/jobs/publish", {"body": "hello", "tag": "t1", "headers": '{"k": "v"}'})
    assert "to 'jobs' at offset 0" in flash
    page = await console.get("/queues/jobs")
    [hello] = page.context["messages"]
    assert (hello["text"], hello["tag"], hello["headers"]) == ("hello", "t1", {"k": "v"})
    assert "<b>k</b>: v" in page.text  # how the page lays out a header

    assert "saved" not in await console.act("/queues/jobs/visibility", {"consumer_visible": "yes"})
    assert not queue.producer_visible and queue.consumer_visible
    assert "not visible to producers" in await console.act("/queues/jobs/publish", {"body": "no"})
    await console.act("/queues/jobs/visibility", {"producer_visible": "yes", "consumer_visible": "yes"})

    assert "confirmation" in await console.act("/queues/jobs/purge", {})
    assert broker.store.next_offset(queue.id) - broker.store.first_offset(queue.id) == 1
    assert "purged: 1 messages" in await console.act("/queues/jobs/purge", {"confirm": "yes"})

    await broker.publish("", [{"body": "left", "routing_key": "jobs"}])
    await broker.declare_group("jobs", "g", {})
    flash = await console.act("/queues/jobs/delete", {"confirm": "yes"})
    assert "unconsumed messages" in flash and "jobs" in broker.queues
    response = await console.post("/queues/jobs/delete", {"confirm": "yes", "force": "yes"})
    assert response.headers["location"] == "/queues"
    assert "jobs" not in broker.queues


async def test_a_queue_form_names_every_bad_field(app: FastAPI, console: Console) -> None:
    flash = await console.act("/queues", {"name": "bad name", "max_messages": "many", "max_bytes": "-5"})
    assert flash == ("invalid queue name 'bad name': use 1-200 characters of A-Z a-z 0-9 . _ - :; "
                     "Max messages: must be a whole number, not 'many'; Max bytes: must be 1 or more")
    assert "bad name" not in app.state.broker.queues
    flash = await console.act("/exchanges", {"name": "bad/name", "type": "direct", "alternate_exchange": "no way"})
    assert flash == ("invalid exchange name 'bad/name': use 1-200 characters of A-Z a-z 0-9 . _ - :; "
                     "Alternate exchange: invalid exchange name 'no way': "
                     "use 1-200 characters of A-Z a-z 0-9 . _ - :")
    flash = await console.act("/access/tokens", {"name": "", "write": "(", "read": "[a"})
    assert flash.startswith("a token needs a name; invalid write pattern '(': ")
    assert "; invalid read pattern '[a': " in flash


async def test_publish_through_an_exchange(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("fan", {"type": "fanout"})
    await broker.declare_queue("one", {})
    await broker.bind({"exchange": "fan", "queue": "one"})
    flash = await console.act("/queues/one/publish", {"exchange": "fan", "body": "b", "routing_key": "rk"})
    assert "'one' at offset 0" in flash
    await broker.unbind(broker.bindings(exchange="fan")[0].id)
    assert "unroutable" in await console.act("/queues/one/publish", {"exchange": "fan", "body": "b"})


async def test_seek_and_delete_a_group(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("s", {})
    await broker.publish("", [{"body": str(i), "routing_key": "s"} for i in range(10)])
    await broker.pull("s", "g", 10, 0, "c")
    broker.ack("s", "g", {"up_to": 10})
    group = broker.queues["s"].groups["g"]
    assert "now at offset 0" in await console.act("/queues/s/seek", {"group": "g", "to": "earliest"})
    assert group.next_offset == 0
    assert "now at offset 4" in await console.act("/queues/s/seek", {"group": "g", "to": "offset", "offset": "4"})
    assert "now at offset 10" in await console.act("/queues/s/seek", {"group": "g", "to": "latest"})
    assert "now at offset 0" in await console.act("/queues/s/seek", {"group": "g", "to": "time",
                                                                       "time": "2001-01-01T00:00"})
    assert "group_not_found" not in await console.act("/queues/s/seek", {"group": "nope", "to": "latest"})
    assert "choose" in await console.act("/queues/s/seek", {"group": "g", "to": "sideways"})
    assert "deleted" in await console.act("/queues/s/groups/g/delete", {"confirm": "yes"})
    assert "g" not in broker.queues["s"].groups


async def test_pause_and_resume_a_group_and_see_its_state(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("p", {})
    await broker.declare_group("p", "g", {"single_active_consumer": True})
    page = await console.get("/queues/p")
    assert "/queues/p/groups/g/pause" in page.text and "single active consumer" in page.text
    assert "paused" in await console.act("/queues/p/groups/g/pause", {})
    group = broker.queues["p"].groups["g"]
    assert group.paused and group.paused_until_ms is None
    page = await console.get("/queues/p")
    assert "/queues/p/groups/g/resume" in page.text and ">paused<" in page.text.replace("\n", "")
    assert "resumed" in await console.act("/queues/p/groups/g/resume", {})
    assert not group.paused
    await console.act("/queues/p/groups/g/pause", {"until": "2999-01-01T00:00"})
    assert group.paused_until_ms == 32472144000000
    assert "paused until 2999-01-01" in (await console.get("/queues/p")).text
    assert "until_ms" in await console.act("/queues/p/groups/g/pause", {"until": "2001-01-01T00:00"})  # past
    assert "not a time" in await console.act("/queues/p/groups/g/pause", {"until": "soon"})
    await broker.pull("p", "g", 1, 0, "c1")
    await console.act("/queues/p/groups/g/resume", {})
    await broker.pull("p", "g", 1, 0, "c1")
    live = await console.client.get("/queues/p", headers={"HX-Request": "true"})
    assert 'c1 <span class="muted">' in live.text and ">active</span>" in live.text


async def test_redrive_moves_dead_letters_back(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("dlx", {"type": "fanout"})
    await broker.declare_queue("dead", {})
    await broker.bind({"exchange": "dlx", "queue": "dead"})
    await broker.declare_queue("work", {"dead_letter_exchange": "dlx", "max_deliveries": 1})
    await broker.publish("", [{"body": f"job {i}", "routing_key": "work", "tag": "t", "headers": {"h": str(i)}}
                              for i in range(3)])
    pulled = orjson.loads(await broker.pull("work", "workers", 3, 0, "c"))["messages"]
    broker.nack("work", "workers", {"offsets": [m["offset"] for m in pulled[:2]]})
    broker.ack("work", "workers", {"offsets": [pulled[2]["offset"]]})
    dead = broker.queues["dead"]
    assert broker.store.next_offset(dead.id) == 2
    page = await console.get("/queues/dead")
    assert page.context["dead_lettered"]
    assert [(m["text"], m["headers"]["x-death-queue"]) for m in page.context["messages"]] == [
        ("job 0", "work"), ("job 1", "work")]

    flash = await console.act("/queues/dead/redrive", {"limit": "100"})
    assert "moved 2 (2 to 'work')" in flash
    assert broker.store.first_offset(dead.id) == 2  # gone from the dead-letter queue
    again = orjson.loads(await broker.pull("work", "workers", 10, 0, "c"))["messages"]
    assert [(m["body"], m["tag"], m["headers"]) for m in again] == [
        ("job 0", "t", {"h": "0"}), ("job 1", "t", {"h": "1"})
    ]

    await broker.publish("", [{"body": "stray", "routing_key": "dead"}])
    flash = await console.act("/queues/dead/redrive", {})
    assert "moved 0" in flash and "stopped at offset 2: it has no x-death-queue header" in flash
    assert broker.store.first_offset(dead.id) == 2  # nothing dropped


async def test_tokens_and_users(app: FastAPI, console: Console) -> None:
    meta = app.state.broker.meta
    flash = await console.act("/access/tokens", {"name": "ci", "write": "orders\\..*", "read": ".*"})
    assert "copy it now" in flash and "cmq_" in flash
    [bootstrap, token] = meta.list_tokens()
    assert (token.name, token.write, token.read, token.configure) == ("ci", "orders\\..*", ".*", "")
    assert "invalid write pattern" in await console.act("/access/tokens", {"name": "bad", "write": "("})
    page = await console.get("/access")
    [listed] = [t for t in page.context["tokens"] if t.id == token.id]
    assert listed.prefix == token.prefix and listed.last_used_at is None
    assert "confirmation" in await console.act(f"/access/tokens/{token.id}/delete", {})
    assert "revoked" in await console.act(f"/access/tokens/{token.id}/delete", {"confirm": "yes"})
    assert [t.name for t in meta.list_tokens()] == [bootstrap.name]

    short = await console.act("/access/users", {"name": "ops", "password": "pw", "admin": "yes"})
    assert "a password needs at least 12 characters (this one has 2)" in short
    created = await console.act("/access/users", {"name": "ops", "password": "ops password 1", "admin": "yes"})
    assert "created" in created
    assert "exists" in (await console.act("/access/users", {"name": "ops", "password": "ops password 1"})).lower()
    assert "cannot delete the user you are logged in as" in await console.act(
        "/access/users/admin/delete", {"confirm": "yes"})
    assert "deleted" in await console.act("/access/users/ops/delete", {"confirm": "yes"})
    assert [u.name for u in meta.list_users()] == ["admin"]
    assert "wrong" in await console.act("/access/password", {"current": "x", "new": "a", "repeat": "a"})


async def test_definitions_round_trip(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("rx", {"type": "topic"})
    await broker.declare_queue("rq", {"max_deliveries": 3})
    await broker.bind({"exchange": "rx", "queue": "rq", "routing_key": "a.#"})
    await broker.declare_group("rq", "workers", {})
    document = (await console.get("/definitions.json")).text
    await broker.delete_queue("rq", force=True)
    await broker.delete_exchange("rx", if_unused=False)
    flash = await console.act("/definitions", {"document": document})
    assert "created 1 exchanges, 1 queues, 1 bindings, 1 groups" in flash
    assert broker.queues["rq"].settings.max_deliveries == 3 and "workers" in broker.queues["rq"].groups
    assert [b.routing_key for b in broker.bindings(exchange="rx")] == ["a.#"]
    assert "nothing new" in await console.act("/definitions", {"document": document})
    conflict = document.replace('"max_deliveries": 3', '"max_deliveries": 4')
    assert "exists" in await console.act("/definitions", {"document": conflict})
    assert "not valid JSON" in await console.act("/definitions", {"document": "{"})
