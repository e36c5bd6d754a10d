"""/api/v1/alerts: rules, current alerts, history (transitions and mails), SMTP settings, a test mail.

Reading needs any valid token; changing rules and sending a test mail need an admin token.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from chunkmq.alerts.engine import AlertView
from chunkmq.alerts.errors import MailFailed, SmtpNotConfigured
from chunkmq.alerts.jobs import Alerts
from chunkmq.alerts.rules import Address, RuleSpec
from chunkmq.api import schemas
from chunkmq.api.deps import json
from chunkmq.meta.alerts import AlertEventRow, AlertRuleRow
from chunkmq.wire import codes

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])

EVENT_STATES = ("ok", "pending", "firing", "resolved", "sent", "failed")
RuleId = Path(ge=1, le=2**63 - 1, description="the rule's id")  # SQLite's rowid: POST may follow a PUT of a large id


class RuleBody(RuleSpec):
    """A rule as JSON: strict types (`"enabled": 0` is not false); the console's form is lax."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TestEmailBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    to: list[Address] = Field(default_factory=list, max_length=50, description="empty: CHUNKMQ_SMTP_TO")


def alerts_of(request: Request) -> Alerts:
    alerts: Alerts = request.app.state.alerts
    return alerts


def rule_json(r: AlertRuleRow) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "queue": r.queue, "group": r.group, "threshold": r.threshold,
            "for_seconds": r.for_seconds, "renotify_seconds": r.renotify_seconds,
            "window_seconds": r.window_seconds, "recipients": list(r.recipients), "enabled": r.enabled,
            "created_at": r.created_at.isoformat(), "updated_at": r.updated_at.isoformat()}


def event_json(e: AlertEventRow) -> dict[str, Any]:
    return {"id": e.id, "at": e.at_ms, "type": e.type, "state": e.state, "previous": e.previous,
            "rule_id": e.rule_id, "kind": e.kind, "queue": e.queue, "group": e.group, "value": e.value,
            "threshold": e.threshold, "detail": e.detail}


def alert_json(a: AlertView) -> dict[str, Any]:
    return {"rule_id": a.rule_id, "kind": a.kind, "queue": a.queue, "group": a.group, "state": a.state,
            "value": a.value, "threshold": a.threshold, "since": a.since_ms, "fired_at": a.fired_at_ms}


async def _put(request: Request, id: int | None, body: RuleSpec) -> tuple[AlertRuleRow, bool]:
    return await asyncio.to_thread(alerts_of(request).repo.put_rule, id, **body.model_dump())


@router.get("", responses=schemas.answers(schemas.Alerts))
async def current_alerts(request: Request, state: Literal["pending", "firing", "resolved"] | None = None) -> Response:
    """Alerts that are not OK: pending, firing (first) and resolved."""
    views = alerts_of(request).engine.current()
    return json({"alerts": [alert_json(a) for a in views if state is None or a.state == state]})


@router.get("/rules", responses=schemas.answers(list[schemas.AlertRule]))
async def list_rules(request: Request) -> Response:
    return json([rule_json(r) for r in await asyncio.to_thread(alerts_of(request).repo.list_rules)])


@router.post("/rules", status_code=201, responses=schemas.answers(
    schemas.AlertRule, codes.INVALID_REQUEST, codes.INVALID_BODY, status=201, description="Created"))
async def create_rule(request: Request, body: RuleBody) -> Response:
    row, _ = await _put(request, None, body)
    return json(rule_json(row), 201)


@router.get("/rules/{rule_id}", responses=schemas.answers(schemas.AlertRule, codes.RULE_NOT_FOUND))
async def get_rule(rule_id: int = RuleId, *, request: Request) -> Response:
    return json(rule_json(await asyncio.to_thread(alerts_of(request).repo.get_rule, rule_id)))


@router.put("/rules/{rule_id}", responses=schemas.answers(
    schemas.AlertRule, codes.INVALID_REQUEST, codes.INVALID_BODY, created=True))
async def put_rule(rule_id: int = RuleId, *, request: Request, body: RuleBody) -> Response:
    """Create rule `rule_id`, or replace it (its alerts start afresh)."""
    row, created = await _put(request, rule_id, body)
    return json(rule_json(row), 201 if created else 200)


@router.delete("/rules/{rule_id}", status_code=204, responses=schemas.answers(
    None, codes.RULE_NOT_FOUND, status=204, description="Deleted"))
async def delete_rule(rule_id: int = RuleId, *, request: Request) -> Response:
    await asyncio.to_thread(alerts_of(request).repo.delete_rule, rule_id)
    return Response(status_code=204)


@router.get("/events", responses=schemas.answers(list[schemas.AlertEvent]))
async def events(
    request: Request,
    state: Literal[EVENT_STATES] | None = Query(None, description="transition state or mail outcome"),  # type: ignore[valid-type]
    since: int | None = Query(None, ge=0, le=2**62, description="epoch ms"),
    rule: int | None = Query(None, ge=1, le=2**63 - 1),
    queue: str | None = Query(None, max_length=200),
    limit: int = Query(500, ge=1, le=10_000),
) -> Response:
    """Transitions and mail attempts, newest first."""
    rows = await asyncio.to_thread(alerts_of(request).repo.events, state=state, since_ms=since, rule_id=rule,
                                   queue=queue, limit=limit)
    return json([event_json(e) for e in rows])


@router.post("/test-email", responses=schemas.answers(
    schemas.MailSent, codes.INVALID_REQUEST, codes.INVALID_BODY, SmtpNotConfigured.code, MailFailed.code))
async def test_email(request: Request, body: TestEmailBody = Body(default_factory=TestEmailBody)) -> Response:
    """Send a test mail now to `to` (default CHUNKMQ_SMTP_TO); 502 smtp_failed with the server's answer."""
    answer = await alerts_of(request).test_email(body.to)
    return json({"sent": True, "answer": answer})


@router.get("/settings", responses=schemas.answers(schemas.MailSettings))
async def mail_settings(request: Request) -> Response:
    """The mail settings in effect (never the password: only whether one is set)."""
    s = alerts_of(request).settings
    return json({
        "smtp": {"host": s.smtp_host, "port": s.smtp_port, "starttls": s.smtp_starttls, "tls": s.smtp_tls,
                 "user": s.smtp_user, "password_set": bool(s.smtp_password.get_secret_value()),
                 "from": s.smtp_from, "to": list(s.smtp_recipients)},
        "console_url": s.console_base_url,
        "interval_seconds": s.alert_interval_seconds,
        "digest_seconds": s.alert_digest_seconds,
    })
