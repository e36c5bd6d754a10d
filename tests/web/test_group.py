"""The consumer group page (app/web/group.py): its numbers and the messages in flight, by offset, a page
at a time; linked from the queue page and the groups page."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from chunkmq.web import group as group_page
from tests.web.conftest import Console

pytestmark = pytest.mark.anyio


async def test_the_group_page_lists_what_is_in_flight(app: FastAPI, console: Console,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    broker = app.state.broker
    await broker.declare_queue("q", {"ack_timeout_ms": 60_000})
    await broker.publish("", [{"body": f"m{i}"} for i in range(8)], queue_name="q")
    await broker.pull("q", "g.1", 3, 0, "worker-1")
    await broker.pull("q", "g.1", 2, 0, "worker-2")
    monkeypatch.setattr(group_page, "PAGE", 4)
    r = await console.get("/queues/q/groups/g.1")
    assert r.status_code == 200 and r.template == "group.html"  # type: ignore[attr-defined]
    flight = r.context["flight"]  # type: ignore[attr-defined]
    assert [(m.offset, m.consumer, m.delivery_count) for m in flight.messages] == [
        (0, "worker-1", 1), (1, "worker-1", 1), (2, "worker-1", 1), (3, "worker-2", 1)]
    assert flight.in_flight == 5 and flight.next_after == 3 and 'href="?after=3#inflight"' in r.text
    r = await console.get("/queues/q/groups/g.1", params={"after": "3"})
    assert [m.offset for m in r.context["flight"].messages] == [4]  # type: ignore[attr-defined]
    link = 'href="/queues/q/groups/g.1"'
    assert link in (await console.get("/queues/q")).text and link in (await console.get("/groups")).text
    assert (await console.get("/queues/q/groups/nope")).status_code == 404
    assert (await console.get("/queues/q/groups/g.1", params={"after": "x"})).status_code == 400
