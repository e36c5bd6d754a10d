"""The console's Alerts page (rules, current alerts, history with filters) and Settings page (the
mail settings in effect, a test mail). Rules are changed with POSTs carrying the session's CSRF
token, as every console action; only administrators may change anything."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.responses import HTMLResponse, Response

from chunkmq.alerts.jobs import Alerts
from chunkmq.alerts.rules import DESCRIPTIONS, GROUP_KINDS, UNITS, Kind, RuleSpec
from chunkmq.broker.errors import InvalidInput
from chunkmq.meta.alerts import AlertRuleRow
from chunkmq.web.actions import outcome, posted
from chunkmq.web.forms import confirmed
from chunkmq.web.pages import int_param, require_admin
from chunkmq.web.render import NAV, render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, current_session

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
NAV.extend([("/alerts", "Alerts"), ("/settings", "Settings")])

EVENT_STATES = ("pending", "firing", "resolved", "ok", "sent", "failed")
EVENTS_SHOWN = 200


def alerts_of(request: Request) -> Alerts:
    alerts: Alerts = request.app.state.alerts
    return alerts


def spec_from(form: dict[str, str]) -> RuleSpec:
    """The rule form as a RuleSpec; blank numbers keep their defaults, recipients are comma-separated."""
    body: dict[str, Any] = {k: form.get(k, "").strip() for k in ("kind", "queue", "group", "threshold")}
    for k in ("for_seconds", "renotify_seconds", "window_seconds"):
        if form.get(k, "").strip():
            body[k] = form[k].strip()
    body["queue"] = body["queue"] or "*"
    body["group"] = body["group"] or "*"
    body["recipients"] = [a.strip() for a in form.get("recipients", "").split(",") if a.strip()]
    body["enabled"] = form.get("enabled") == "yes"
    try:
        return RuleSpec.model_validate(body)
    except ValidationError as e:
        raise InvalidInput("; ".join(rule_problem(error) for error in e.errors())) from None


# The rule form's labels, and what its checks mean in words (pydantic's own messages quote regexes).
RULE_LABELS = {"kind": "Kind", "threshold": "Threshold", "queue": "Queues", "group": "Groups", "for_seconds": "For",
               "renotify_seconds": "Re-notify every", "window_seconds": "Window", "recipients": "Recipients"}
GLOB_HINT = "use 1-200 characters of A-Z a-z 0-9 . _ - : and the wildcards * ? [ ] !"


def rule_problem(error: ErrorDetails) -> str:
    """One bad field of the rule form as "<label>: <what is wrong>"."""
    field = str(error["loc"][0]) if error["loc"] else ""
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if value == "" and kind in ("float_parsing", "string_pattern_mismatch", "literal_error"):
        text = "required"
    elif kind == "string_pattern_mismatch":
        text = f"{value!r} is not an e-mail address" if field == "recipients" else f"{value!r}: {GLOB_HINT}"
    elif kind == "float_parsing":
        text = f"must be a number, not {value!r}"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        words = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most"}[kind]
        bound = float(next(iter(ctx.values())))
        shown = f"{int(bound):,}" if bound.is_integer() else f"{bound:g}"
        text = f"must be {words} {shown}{' s' if field.endswith('_seconds') else ''}"
    elif kind == "literal_error":
        text = f"must be one of {', '.join(k.value for k in Kind)}"
    elif kind in ("string_too_long", "too_long"):
        text = f"at most {ctx['max_length']} {'characters' if kind == 'string_too_long' else 'addresses'}"
    else:
        text = error["msg"]
    return f"{RULE_LABELS.get(field, field)}: {text}" if field else text


def describe(rule: AlertRuleRow) -> str:
    kind = Kind(rule.kind)
    return f"{DESCRIPTIONS[kind]} ≥ {rule.threshold:g} {UNITS[kind]}"


@router.get("/alerts")
async def alerts_page(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    alerts = alerts_of(request)
    state = request.query_params.get("state", "")
    if state and state not in EVENT_STATES:
        raise InvalidInput(f"state must be one of {', '.join(EVENT_STATES)}")
    queue = request.query_params.get("queue", "").strip()
    rule_id = int_param(request, "rule", 0)
    rules = await asyncio.to_thread(alerts.repo.list_rules)
    events = await asyncio.to_thread(alerts.repo.events, state=state or None, queue=queue or None,
                                     rule_id=rule_id or None, limit=EVENTS_SHOWN)
    outbox = alerts.outbox
    return render(
        request, "alerts.html", session, rules=rules, describe=describe, current=alerts.engine.current(),
        events=events, kinds=[k.value for k in Kind], units={k.value: u for k, u in UNITS.items()},
        group_kinds={k.value for k in GROUP_KINDS}, states=EVENT_STATES, state=state, queue=queue, rule_id=rule_id,
        mail={"sent": outbox.sent, "failed": outbox.failed, "given_up": outbox.given_up, "waiting": outbox.waiting,
              "configured": bool(alerts.settings.smtp_host)},
    )


@router.post("/alerts/rules")
async def create_rule(request: Request) -> Response:
    session, form = await posted(request)
    repo = alerts_of(request).repo

    async def work() -> str:
        spec = spec_from(form)
        row, _ = await asyncio.to_thread(repo.put_rule, None, **spec.model_dump())
        return f"alert rule {row.id} created: {describe(row)}"

    return await outcome(request, session, "/alerts", work)


@router.post("/alerts/rules/{rule_id}/enabled")
async def enable_rule(rule_id: int, request: Request) -> Response:
    session, form = await posted(request)
    repo = alerts_of(request).repo
    enabled = form.get("enabled") == "yes"

    async def work() -> str:
        rule = await asyncio.to_thread(repo.get_rule, rule_id)
        fields = {f: getattr(rule, f) for f in RuleSpec.model_fields}
        await asyncio.to_thread(repo.put_rule, rule_id, **{**fields, "enabled": enabled})
        return f"alert rule {rule_id} {'enabled' if enabled else 'disabled'}"

    return await outcome(request, session, "/alerts", work)


@router.post("/alerts/rules/{rule_id}/delete")
async def delete_rule(rule_id: int, request: Request) -> Response:
    session, form = await posted(request)
    repo = alerts_of(request).repo

    async def work() -> str:
        confirmed(form)
        await asyncio.to_thread(repo.delete_rule, rule_id)
        return f"alert rule {rule_id} deleted"

    return await outcome(request, session, "/alerts", work)


@router.get("/settings")
async def settings_page(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    require_admin(session)
    return render(request, "settings.html", session, s=alerts_of(request).settings)


@router.post("/settings/test-email")
async def test_email(request: Request) -> Response:
    session, form = await posted(request)
    to = [a.strip() for a in form.get("to", "").split(",") if a.strip()]

    async def work() -> str:
        answer = await alerts_of(request).test_email(to)
        return f"test mail sent; the server answered: {answer}"

    return await outcome(request, session, "/settings", work)
