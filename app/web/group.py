"""A consumer group's page (GET /queues/{name}/groups/{group}): its numbers and the messages in flight
now, with their consumer, delivery count and deadline, a page at a time by offset."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import HTMLResponse

from chunkmq.broker import views
from chunkmq.web.pages import broker_of, int_param, stalled_check
from chunkmq.web.render import render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, current_session

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

PAGE = 50  # messages in flight a page


@router.get("/queues/{name}/groups/{group}")
async def group_page(name: str, group: str, request: Request,
                     session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    queue = views.find_queue(broker, name)
    g = views.find_group(queue, group)
    after = int_param(request, "after", -1, -1)
    return render(request, "group.html", session, q=queue, g=g, stalled=stalled_check(request),
                  flight=views.in_flight(broker, name, group, after, PAGE), now=views.now_ms())
