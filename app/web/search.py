"""The queue page's Search tab (GET /queues/{name}/search): the API's search as a form, its results a
page at a time (the cursor in the "more" link), and one message opened whole (`open=<offset>`).

The form's fields become the API's request body (docs/api.md, Search) and are checked by the same
code, so a bad field is shown as the API would name it. A search is a read: a GET with no CSRF token,
its address a link one can share, as the message browser's.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from starlette.responses import HTMLResponse

from chunkmq.broker import search as searching
from chunkmq.broker import views
from chunkmq.broker.errors import InvalidInput
from chunkmq.web.forms import utc_ms
from chunkmq.web.pages import broker_of, display
from chunkmq.web.render import render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, current_session

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

LIMITS = (10, 25, 50, 100)
FORM = ("body", "ignore_case", "regex", "json_path", "header", "header_value", "routing_key", "routing_key_match",
        "tag", "tag_match", "message_id", "idempotency_key", "from_offset", "to_offset", "from_time", "to_time",
        "limit")


MAX_MARKS = 100  # highlighted matches a message


def highlight(text: str, needle: str, ignore_case: bool, pattern: str) -> list[tuple[str, bool]]:
    """`text` cut into (piece, matched) runs: where the body's text or its regular expression matched
    (the first MAX_MARKS of them), for the results to mark."""
    spans: list[tuple[int, int]] = []
    if needle:
        hay, pin = (text.lower(), needle.lower()) if ignore_case else (text, needle)
        at = hay.find(pin)
        while at >= 0 and len(spans) < MAX_MARKS:
            spans.append((at, at + len(pin)))
            at = hay.find(pin, at + len(pin))
    if pattern:
        try:
            regex = searching.compile_regex(pattern, ignore_case)
        except InvalidInput:
            regex = None
        if regex is not None:
            for m in regex.finditer(text):
                if len(spans) >= 2 * MAX_MARKS:
                    break
                if m.end() > m.start():
                    spans.append((m.start(), m.end()))
    out: list[tuple[str, bool]] = []
    done = 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        start = max(start, done)
        if start > done:
            out.append((text[done:start], False))
        out.append((text[start:end], True))
        done = end
    if done < len(text) or not out:
        out.append((text[done:], False))
    return out


def _whole_number(text: str, field: str) -> int:
    if not text.isdigit():
        raise InvalidInput(f"{field} must be a whole number")
    return int(text)


def request_body(form: dict[str, str]) -> dict[str, Any]:
    """The API's search body for the form's fields (empty fields left out)."""
    body: dict[str, Any] = {"limit": int(form["limit"]) if form.get("limit", "").isdigit() else 25}
    if form.get("cursor"):
        return {**body, "cursor": form["cursor"]}
    if form.get("body"):
        body["body_contains"] = form["body"]
    if form.get("regex"):
        body["body_regex"] = form["regex"]
    if form.get("ignore_case"):
        body["ignore_case"] = True
    if form.get("json_path"):
        body["json_path"] = form["json_path"]
    if form.get("header"):
        if form.get("header_value"):
            body["header_equals"] = {form["header"]: form["header_value"]}
        else:
            body["header_exists"] = [form["header"]]
    for name in ("routing_key", "tag"):
        if form.get(name):
            body[name + ("_prefix" if form.get(f"{name}_match") == "prefix" else "")] = form[name]
    for name in ("message_id", "idempotency_key"):
        if form.get(name):
            body[name] = form[name].strip()
    for name in ("from_offset", "to_offset"):
        if form.get(name):
            body[name] = _whole_number(form[name].strip(), name)
    for name, field in (("from_time", "from_timestamp"), ("to_time", "to_timestamp")):
        if form.get(name):
            body[field] = utc_ms(form[name])
    return body


@router.get("/queues/{name}/search")
async def search_page(name: str, request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    broker = broker_of(request)
    queue = views.find_queue(broker, name)
    params = request.query_params
    form = {k: params.get(k, "") for k in FORM}
    result: views.SearchView | None = None
    error: str | None = None
    opened: dict[str, Any] | None = None
    if params.get("open", "").isdigit():
        page = views.browse(broker, name, int(params["open"]), None, 1)
        if page.messages and page.messages[0].offset == int(params["open"]):
            opened = display(page.messages[0], preview=None)
    if "run" in params:
        try:
            result = await views.search(broker, name, request_body({**form, "cursor": params.get("cursor", "")}))
        except InvalidInput as exc:
            error = str(exc)
    messages = [display(m) for m in result.messages] if result else []
    for m in messages:  # a hex dump is not marked
        m["marked"] = (highlight(m["text"], form["body"], bool(form["ignore_case"]), form["regex"])
                       if m["kind"] != "binary" else None)
    query = {k: v for k, v in form.items() if v}
    more = None
    if result is not None and result.cursor is not None:
        more = urlencode({**query, "run": "1", "cursor": result.cursor})
    return render(
        request, "queue_search.html", session, status=400 if error else 200, q=queue, form=form, limits=LIMITS,
        result=result, messages=messages, error=error,
        opened=opened, more=more, here=urlencode({**query, "run": "1", **(
            {"cursor": params["cursor"]} if params.get("cursor") else {})}),
    )
