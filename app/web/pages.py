"""The console's pages (GET): each renders views from app/broker/views.py, never broker internals.

A request from htmx (header HX-Request) for a page with live numbers gets only the fragment that
refreshes; every page is complete server-rendered HTML without JavaScript.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.responses import HTMLResponse, Response

from chunkmq.broker import views
from chunkmq.broker.base import now_ms
from chunkmq.broker.broker import Broker
from chunkmq.broker.definitions import SECTIONS, export_definitions
from chunkmq.broker.errors import Forbidden, InvalidInput
from chunkmq.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS
from chunkmq.broker.views import GroupView, MessageView, QueueView
from chunkmq.web import charts
from chunkmq.web.forms import utc_ms
from chunkmq.web.render import SECURITY_HEADERS, render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, current_session
from chunkmq.web.snapshots import Snapshots

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

TOP_LAGGING = 10
BROWSE_LIMITS = (10, 25, 50, 100)
HEX_PREVIEW_BYTES = 4096
SCHEDULED_SHOWN = 25  # the nearest delayed messages a queue page lists
QUEUE_SORTS = ("name", "messages", "bytes", "lag", "rate")  # views.queue_sort_key's, and the names
GROUP_SORTS = {
    "lag": lambda g: (g.lag, g.lag_seconds),
    "lag_seconds": lambda g: (g.lag_seconds, g.lag),
    "queue": lambda g: (g.queue, g.name),
    "name": lambda g: (g.name, g.queue),
}


def broker_of(request: Request) -> Broker:
    return request.app.state.broker  # type: ignore[no-any-return]


def snapshot(request: Request, key: str, build: Callable[[], Any]) -> Any:
    snapshots: Snapshots = request.app.state.web_snapshots
    return snapshots.get(key, build)


def live(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def int_param(request: Request, name: str, default: int, low: int = 0) -> int:
    raw = request.query_params.get(name, "")
    try:
        return max(low, int(raw)) if raw else default
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number") from None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a sorted list: items, position, and the links' query parameters."""

    items: list[Any]
    number: int
    pages: int
    total: int

    @classmethod
    def of(cls, items: list[Any], number: int, size: int) -> Page:
        pages = max(1, math.ceil(len(items) / size))
        number = min(max(1, number), pages)
        return cls(items[(number - 1) * size : number * size], number, pages, len(items))


def stalled_check(request: Request) -> Callable[[GroupView], bool]:
    """Stalled: messages wait and the ack floor has not moved for console_stalled_seconds (the history
    knows when it last moved). Before a group's first sample: nothing in flight and no consumer."""
    broker = broker_of(request)
    limit_ms = request.app.state.settings.console_stalled_seconds * 1000
    now = now_ms()

    def stalled(g: GroupView) -> bool:
        if g.lag == 0:
            return False
        moved = broker.history.floor_moved_at(g.queue, g.name)
        if moved is None:
            return g.in_flight == 0 and not g.consumers
        return now - moved > limit_ms

    return stalled


def all_groups(queues: list[QueueView]) -> list[GroupView]:
    return [g for q in queues for g in q.groups]


# ---------------------------------------------------------------------- overview


@router.get("/")
async def overview(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    top = snapshot(request, "lagging", lambda: views.lagging_groups(broker, TOP_LAGGING))  # no view of every queue
    alerts = getattr(request.app.state, "alerts", None)
    context = {"ov": snapshot(request, "overview", lambda: views.overview(broker)), "top": top,
               "firing": alerts.firing() if alerts is not None else []}
    if live(request):
        return render(request, "overview_live.html", session, **context)
    return render(request, "overview.html", session, **context)


@router.get("/charts/overview.json")
async def overview_chart(request: Request, session: Session = Depends(current_session)) -> Response:
    charts_ = await charts.overview_charts(broker_of(request))
    return chart_response(charts_, request.query_params.get("chart", "rates"))


def chart_response(charts_: dict[str, charts.Chart], name: str) -> Response:
    if name not in charts_:
        raise InvalidInput(f"chart must be one of {', '.join(charts_)}")
    return Response(orjson.dumps(charts_[name]), media_type="application/json", headers=SECURITY_HEADERS)


# ---------------------------------------------------------------------- exchanges


@router.get("/exchanges")
async def exchanges(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    items = views.exchange_views(broker)
    if live(request):
        return render(request, "exchanges_live.html", session, exchanges=items)
    types = ("direct", "fanout", "topic", "headers", "hash")
    return render(request, "exchanges.html", session, exchanges=items, types=types)


@router.get("/exchanges/{name}")
async def exchange(name: str, request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    view = views.find_exchange(broker, name)
    key = DEFAULT_EXCHANGE if view.name == DEFAULT_EXCHANGE_ALIAS else view.name
    return render(
        request, "exchange.html", session, ex=view, bindings=views.binding_views(broker, exchange=key),
        queue_names=views.queue_names(broker), is_default=key == DEFAULT_EXCHANGE,
    )


# ---------------------------------------------------------------------- queues


@router.get("/queues")
async def queues(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    needle = request.query_params.get("filter", "").strip().lower()
    sort = request.query_params.get("sort", "name")
    if sort not in QUEUE_SORTS:
        sort = "name"
    order = "desc" if request.query_params.get("order", "desc" if sort != "name" else "asc") == "desc" else "asc"
    # Filter on names first, then sort names: views are built for the page's queues alone.
    candidates = views.queue_names(broker, needle)
    now = now_ms()
    if sort == "name":
        ordered = candidates[::-1] if order == "desc" else candidates
    else:  # by a number read per queue
        ordered = sorted(candidates, key=views.queue_sort_key(broker, sort, now), reverse=order == "desc")
    page = Page.of(ordered, int_param(request, "page", 1, 1), request.app.state.settings.console_page_size)
    items = [v for n in page.items if (v := views.lookup_queue(broker, n, now)) is not None]
    context = {"page": page, "queues": items, "filter": needle, "sort": sort, "order": order}
    if live(request):
        return render(request, "queues_live.html", session, **context)
    return render(request, "queues.html", session, **context)


def display(message: MessageView, preview: int | None = HEX_PREVIEW_BYTES) -> dict[str, Any]:
    """A browsed message for the page: JSON bodies pretty-printed, binary bodies as hex (the first
    `preview` bytes; None: all of them)."""
    out = dataclasses.asdict(message)
    if message.body_base64 is not None:
        raw = binascii.a2b_base64(message.body_base64)
        out["kind"] = "binary"
        out["size"] = len(raw)
        out["text"] = _hexdump(raw if preview is None else raw[:preview])
        out["truncated"] = preview is not None and len(raw) > preview
        return out
    body = message.body or ""
    out["size"] = len(body.encode())
    out["truncated"] = False
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict | list):
        out["kind"] = "json"
        out["text"] = orjson.dumps(parsed, option=orjson.OPT_INDENT_2).decode()
    else:
        out["kind"] = "text"
        out["text"] = body
    return out


def _hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        row = data[i : i + 16]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{i:08x}  {row.hex(' '):<47}  {ascii_}")
    return "\n".join(lines)


@router.get("/queues/{name}")
async def queue(name: str, request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    view = views.find_queue(broker, name)
    if live(request):
        return render(request, "queue_live.html", session, q=view, stalled=stalled_check(request))
    limit = int_param(request, "limit", 25, 1)
    limit = min(limit, max(BROWSE_LIMITS))
    at_time = request.query_params.get("time", "").strip()
    offset = int_param(request, "offset", view.first_offset) if not at_time else None
    timestamp = utc_ms(at_time) if at_time else None
    page = views.browse(broker, name, offset, timestamp, limit)
    messages = [display(m) for m in page.messages]
    start = page.messages[0].offset if page.messages else page.next_offset
    chart_range = request.query_params.get("range", "1h")
    if chart_range not in charts.RANGES:
        chart_range = "1h"
    return render(
        request, "queue.html", session, q=view, stalled=stalled_check(request), messages=messages, start=start,
        chart_range=chart_range, chart_ranges=tuple(charts.RANGES),
        next_offset=page.next_offset, prev_offset=max(view.first_offset, start - limit), limit=limit,
        limits=BROWSE_LIMITS, at_time=at_time, bindings=views.binding_views(broker, queue=name),
        exchange_names=views.exchange_names(broker),
        dead_lettered=any("x-death-queue" in m.headers for m in page.messages),
        scheduled=broker.scheduled_messages(name, SCHEDULED_SHOWN)["messages"] if view.scheduled else [],
    )


@router.get("/queues/{name}/charts.json")
async def queue_chart(name: str, request: Request, session: Session = Depends(current_session)) -> Response:
    broker = broker_of(request)
    charts_ = await charts.queue_charts(broker, views.find_queue(broker, name), request.query_params.get("range", "1h"))
    return chart_response(charts_, request.query_params.get("chart", "depth"))


# ---------------------------------------------------------------------- groups, storage


@router.get("/groups")
async def groups(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    sort = request.query_params.get("sort", "lag")
    if sort not in GROUP_SORTS:
        sort = "lag"
    order = request.query_params.get("order", "asc" if sort in ("queue", "name") else "desc")
    queues = snapshot(request, "queues", lambda: views.queue_views(broker))
    items = sorted(all_groups(queues), key=GROUP_SORTS[sort], reverse=order == "desc")
    page = Page.of(items, int_param(request, "page", 1, 1), request.app.state.settings.console_page_size)
    context = {"page": page, "groups": page.items, "sort": sort, "order": order, "stalled": stalled_check(request),
               "stalled_seconds": request.app.state.settings.console_stalled_seconds}
    if live(request):
        return render(request, "groups_live.html", session, **context)
    return render(request, "groups.html", session, **context)


@router.get("/storage")
async def storage(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    indexes = await asyncio.to_thread(views.index_views, broker)  # stats the index files
    return render(
        request, "storage.html", session, ov=views.overview(broker), chunks=views.chunk_views(broker),
        indexes=indexes,
    )


# ---------------------------------------------------------------------- access


@router.get("/access")
async def access(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    found = await views.access(broker_of(request))
    return render(request, "access.html", session, tokens=found.tokens, users=found.users)


# ---------------------------------------------------------------------- definitions


@router.get("/definitions")
async def definitions(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    require_admin(session)
    document = await export_definitions(broker_of(request))
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    counts = {section: len(document.get(section, [])) for section in SECTIONS}
    return render(request, "definitions.html", session, document=text, counts=counts)


@router.get("/definitions.json")
async def definitions_file(request: Request, session: Session = Depends(current_session)) -> Response:
    require_admin(session)
    document = await export_definitions(broker_of(request))
    return Response(
        orjson.dumps(document, option=orjson.OPT_INDENT_2), media_type="application/json",
        headers={**SECURITY_HEADERS, "Content-Disposition": 'attachment; filename="chunkmq-definitions.json"'},
    )


def require_admin(session: Session) -> None:
    if not session.is_admin:
        raise Forbidden(f"{session.user!r} is not an administrator")
