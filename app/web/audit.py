"""The console's side of the audit log (app/broker/audit.py): `record`, the one call in the
console's action path (actions.outcome, and login/logout), and the Audit page (administrators).

What a console action records is named by its route in ACTIONS; its resource is the names in its
path and the name fields of its form (never another field: forms hold passwords).
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from starlette.responses import HTMLResponse

from chunkmq.broker.audit import OK, AuditLog
from chunkmq.web.forms import utc_ms
from chunkmq.web.pages import int_param, require_admin
from chunkmq.web.render import ADMIN_PAGES, NAV, render
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, current_session

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
NAV.append(("/audit", "Audit"))
ADMIN_PAGES.add("/audit")

PAGE_SIZE = 100
LOCKED_OUT = "too_many_attempts"  # a login refused by the failed-login limit (no API code: no API login)

# Console route path -> the action it records (the API's names, app/api/audit.py, for the same change).
ACTIONS: dict[str, str] = {
    "/exchanges": "exchange.declare",
    "/exchanges/{name}/delete": "exchange.delete",
    "/bindings": "binding.create",
    "/bindings/{binding_id}/delete": "binding.delete",
    "/queues": "queue.declare",
    "/queues/{name}/settings": "queue.update",
    "/queues/{name}/visibility": "queue.update",
    "/queues/{name}/publish": "queue.publish",
    "/queues/{name}/purge": "queue.purge",
    "/queues/{name}/delete": "queue.delete",
    "/queues/{name}/redrive": "queue.redrive",
    "/queues/{name}/seek": "group.seek",
    "/queues/{name}/groups/{group}/delete": "group.delete",
    "/queues/{name}/groups/{group}/pause": "group.pause",
    "/queues/{name}/groups/{group}/resume": "group.resume",
    "/access/tokens": "token.create",
    "/access/tokens/{token_id}/delete": "token.delete",
    "/access/users": "user.create",
    "/access/users/{name}/delete": "user.delete",
    "/access/password": "user.password",
    "/definitions": "definitions.import",
    "/alerts/rules": "alert_rule.put",
    "/alerts/rules/{rule_id}/enabled": "alert_rule.update",
    "/alerts/rules/{rule_id}/delete": "alert_rule.delete",
    "/settings/test-email": "alerts.test_email",
    "/login": "login",
    "/logout": "logout",
}
# The form fields that name what an action works on (and are no secret).
NAME_FIELDS = ("name", "exchange", "queue", "group")


def resource_of(request: Request, form: dict[str, str] | None) -> str:
    parts = [str(v) for v in request.path_params.values()]
    if form:
        parts += [form[f].strip() for f in NAME_FIELDS if form.get(f, "").strip()]
    return "/".join(parts)


async def record(request: Request, who: str, result: str = OK, form: dict[str, str] | None = None) -> None:
    """Record the console action of `request` (its route names it in ACTIONS) by `who`, with `result`
    ("ok" or the error code)."""
    action = ACTIONS.get(getattr(request.scope.get("route"), "path", ""))
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if action is None or audit is None:
        return
    address = request.client.host if request.client else ""
    await audit.record("console", who, address, action, resource_of(request, form), result)


@router.get("/audit")
async def audit_page(request: Request, session: Session = Depends(current_session)) -> HTMLResponse:
    require_admin(session)
    q = request.query_params
    filters = {k: q.get(k, "").strip() for k in ("who", "action", "since", "until")}
    cursor = int_param(request, "cursor", 0, low=0) or None
    audit: AuditLog = request.app.state.audit
    rows = await audit.entries(
        who=filters["who"] or None, action=filters["action"] or None,
        since_ms=utc_ms(filters["since"]) if filters["since"] else None,
        until_ms=utc_ms(filters["until"]) if filters["until"] else None,
        before_id=cursor, limit=PAGE_SIZE)
    older = None
    if len(rows) == PAGE_SIZE:
        older = "/audit?" + urlencode({**{k: v for k, v in filters.items() if v}, "cursor": rows[-1].id})
    return render(request, "audit.html", session, entries=rows, filters=filters, older=older,
                  audit_days=request.app.state.settings.audit_days)
