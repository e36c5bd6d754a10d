"""The console's actions: every change is a POST with the session's CSRF token, answered with a
redirect and a flash message saying what happened (or the broker's error message)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from chunkmq.api.errors import api_error, code_of, server_fault
from chunkmq.auth.permissions import InvalidPattern, compile_pattern
from chunkmq.broker import views
from chunkmq.broker.definitions import import_definitions
from chunkmq.broker.errors import Forbidden, InvalidInput
from chunkmq.broker.names import DEFAULT_EXCHANGE, DEFAULT_EXCHANGE_ALIAS, check_name, check_new_name
from chunkmq.broker.redrive import redrive
from chunkmq.web import audit
from chunkmq.web.forms import (
    Problems,
    confirmed,
    json_object,
    optional_int,
    optional_str,
    queue_settings,
    read_form,
    utc_ms,
)
from chunkmq.web.login import safe_next
from chunkmq.web.pages import broker_of
from chunkmq.web.render import redirect, segment
from chunkmq.web.route import ConsoleRoute
from chunkmq.web.session import Session, check_csrf, current_session, sessions_of
from chunkmq.wire import codes

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


async def posted(request: Request, *, admin: bool = True) -> tuple[Session, dict[str, str]]:
    """The session and form of a POST, after the CSRF check. Console users who are not
    administrators may only read (and change their own password)."""
    session = current_session(request)
    form = await read_form(request)
    check_csrf(session.csrf, form.get("csrf"))
    request.state.form = form  # the names in it go into the audit log (audit.resource_of)
    if admin and not session.is_admin:
        await audit.record(request, session.user, codes.FORBIDDEN, form)
        raise Forbidden(f"{session.user!r} is not an administrator: the console is read-only for them")
    return session, form


async def outcome(request: Request, session: Session, back: str, work: Callable[[], Awaitable[str]]) -> Response:
    """Run an action; flash its result, or the API's error message and code, and redirect to
    `back`. A failure of the server itself (whose message the API hides) is left to ConsoleRoute,
    which answers it with the API's status as an error page."""
    form = getattr(request.state, "form", None)
    try:
        session.flash("ok", await work())
        await audit.record(request, session.user, audit.OK, form)
    except Exception as e:
        if server_fault(e):  # ConsoleRoute logs it and answers it as an error page
            await audit.record(request, session.user, code_of(e), form)
            raise
        error = api_error(e)
        await audit.record(request, session.user, error.code, form)
        session.flash("error", error.message, error.code)
    finally:
        request.app.state.web_snapshots.clear()  # the next page shows the action's effect
    return redirect(back)


def pattern(action: str, text: str) -> None:
    """A token's permission pattern from its form: a bad one is an input error naming itself."""
    try:
        compile_pattern(action, text)
    except InvalidPattern as e:
        raise InvalidInput(str(e)) from None


def queue_url(name: str) -> str:
    return f"/queues/{segment(name)}"


def exchange_key(name: str) -> str:
    return DEFAULT_EXCHANGE if name in ("", DEFAULT_EXCHANGE_ALIAS) else name


# ---------------------------------------------------------------------- exchanges, bindings


@router.post("/exchanges")
async def declare_exchange(request: Request) -> Response:
    session, form = await posted(request)
    name = form.get("name", "").strip()

    async def work() -> str:
        alternate = optional_str(form, "alternate_exchange")
        problems = Problems()  # both names checked, so one answer names both when both are bad
        if name != DEFAULT_EXCHANGE_ALIAS:  # may be declared as it is (the broker decides)
            problems.check("", lambda: check_new_name(name, "exchange name"))
        if alternate is not None:
            problems.check("Alternate exchange", lambda: check_name(alternate, "exchange name"))
        problems.raise_any()
        body = {"type": form.get("type", "direct"), "alternate_exchange": alternate}
        _, created = await broker_of(request).declare_exchange(name, body)
        return f"exchange {name!r} {'declared' if created else 'already exists with these properties'}"

    return await outcome(request, session, "/exchanges", work)


@router.post("/exchanges/{name}/delete")
async def delete_exchange(name: str, request: Request) -> Response:
    session, form = await posted(request)
    back = f"/exchanges/{segment(name)}"

    async def work() -> str:
        nonlocal back
        confirmed(form)
        await broker_of(request).delete_exchange(name, if_unused=form.get("if_unused") == "yes")
        back = "/exchanges"
        return f"exchange {name!r} deleted"

    await outcome(request, session, back, work)
    return redirect(back)


@router.post("/bindings")
async def bind(request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        body = {
            "exchange": form.get("exchange", ""), "queue": form.get("queue", ""),
            "routing_key": form.get("routing_key", ""),
            "arguments": json_object(form.get("arguments", ""), "arguments"),
        }
        binding, created = await broker_of(request).bind(body)
        verb = "bound" if created else "already bound"
        return f"{binding.exchange!r} → {binding.queue!r} with key {binding.routing_key!r} {verb}"

    return await outcome(request, session, safe_next(form.get("back")), work)


@router.post("/bindings/{binding_id}/delete")
async def unbind(binding_id: int, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        await broker_of(request).unbind(binding_id)
        return f"binding {binding_id} removed"

    return await outcome(request, session, safe_next(form.get("back")), work)


# ---------------------------------------------------------------------- queues


@router.post("/queues")
async def declare_queue(request: Request) -> Response:
    session, form = await posted(request)
    name = form.get("name", "").strip()
    back = "/queues"

    async def work() -> str:
        nonlocal back
        _, created = await broker_of(request).declare_queue(name, queue_settings(form, new_name=name))
        back = queue_url(name)
        return f"queue {name!r} {'declared' if created else 'already exists with these settings'}"

    await outcome(request, session, back, work)
    return redirect(back)


@router.post("/queues/{name}/settings")
async def update_settings(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        await broker_of(request).update_queue(name, queue_settings(form))
        return f"settings of queue {name!r} saved"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/visibility")
async def retire(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        flags = {f: form.get(f) == "yes" for f in ("producer_visible", "consumer_visible")}
        await broker_of(request).update_queue(name, flags)
        shown = ", ".join(f"{k.split('_')[0]}s {'see it' if v else 'do not see it'}" for k, v in flags.items())
        return f"queue {name!r}: {shown}"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/publish")
async def publish(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        message: dict[str, Any] = {"body": form.get("body", "")}
        headers = json_object(form.get("headers", ""), "headers")
        if headers:
            message["headers"] = headers
        if form.get("tag"):
            message["tag"] = form["tag"]
        message["routing_key"] = form.get("routing_key") or name
        exchange = form.get("exchange", "")
        broker = broker_of(request)
        if exchange in ("", DEFAULT_EXCHANGE_ALIAS):
            outcome_ = await broker.publish(DEFAULT_EXCHANGE, [message], queue_name=name)
        else:
            outcome_ = await broker.publish(exchange, [message])
        result = orjson.loads(outcome_.results)[0]
        routed = (", ".join(f"{r['queue']!r} at offset {r['offset']}" for r in result["routed"])
                  or "no queue (unroutable)")
        return f"published message {result['id']} to {routed}"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/purge")
async def purge(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        confirmed(form)
        return f"queue {name!r} purged: {broker_of(request).purge(name)} messages"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/delete")
async def delete_queue(name: str, request: Request) -> Response:
    session, form = await posted(request)
    back = queue_url(name)

    async def work() -> str:
        nonlocal back
        confirmed(form)
        await broker_of(request).delete_queue(name, force=form.get("force") == "yes")
        back = "/queues"
        return f"queue {name!r} deleted"

    await outcome(request, session, back, work)
    return redirect(back)


@router.post("/queues/{name}/redrive")
async def redrive_dead_letters(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        result = await redrive(broker_of(request), name, optional_int(form, "limit") or 10_000)
        where = ", ".join(f"{n} to {q!r}" for q, n in sorted(result.by_queue.items())) or "nothing"
        text = f"redrive of {name!r}: moved {result.moved} ({where})"
        if result.stopped_at is not None:
            text += f"; stopped at offset {result.stopped_at}: {result.reason}"
        return text

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/seek")
async def seek(name: str, request: Request) -> Response:
    session, form = await posted(request)
    group = form.get("group", "")

    async def work() -> str:
        to = form.get("to", "")
        body: dict[str, Any]
        if to in ("earliest", "latest"):
            body = {"to": to}
        elif to == "offset":
            body = {"offset": optional_int(form, "offset")}
        elif to == "time":
            body = {"timestamp": utc_ms(form.get("time", ""))}
        else:
            raise InvalidInput("choose earliest, latest, an offset or a time")
        g = broker_of(request).seek(name, group, body)
        return f"group {group!r} of {name!r} now at offset {g.next_offset} (ack floor {g.ack_floor})"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/groups/{group}/pause")
async def pause_group(name: str, group: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        until = form.get("until", "").strip()
        g = await broker_of(request).pause_group(name, group, {"until_ms": utc_ms(until)} if until else {})
        return f"group {group!r} of {name!r} paused" + (" until resumed" if g.paused_until_ms is None else "")

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/groups/{group}/resume")
async def resume_group(name: str, group: str, request: Request) -> Response:
    session, _ = await posted(request)

    async def work() -> str:
        await broker_of(request).resume_group(name, group, {})
        return f"group {group!r} of {name!r} resumed"

    return await outcome(request, session, queue_url(name), work)


@router.post("/queues/{name}/groups/{group}/delete")
async def delete_group(name: str, group: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        confirmed(form)
        await broker_of(request).delete_group(name, group)
        return f"group {group!r} of {name!r} deleted"

    return await outcome(request, session, queue_url(name), work)


# ---------------------------------------------------------------------- access


@router.post("/access/tokens")
async def create_token(request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        name = form.get("name", "").strip()
        problems = Problems()
        if not name:
            problems.messages.append("a token needs a name")
        for action in ("configure", "write", "read"):
            problems.check("", partial(pattern, action, form.get(action, "")))
        problems.raise_any()
        row, plain = await broker_of(request).create_token(
            name, is_admin=form.get("admin") == "yes", configure=form.get("configure", ""),
            write=form.get("write", ""), read=form.get("read", ""),
        )
        return f"token {row.id} {row.name!r} created; copy it now, it is not shown again: {plain}"

    return await outcome(request, session, "/access", work)


@router.post("/access/tokens/{token_id}/delete")
async def revoke_token(token_id: int, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        confirmed(form)
        await broker_of(request).delete_token(token_id)
        request.app.state.auth.forget()
        return f"token {token_id} revoked"

    return await outcome(request, session, "/access", work)


@router.post("/access/users")
async def create_user(request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        name = form.get("name", "").strip()
        user = await broker_of(request).create_user(name, form.get("password", ""), form.get("admin") == "yes")
        return f"console user {user.name!r} created"

    return await outcome(request, session, "/access", work)


@router.post("/access/users/{name}/delete")
async def delete_user(name: str, request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        confirmed(form)
        if name == session.user:
            raise InvalidInput("you cannot delete the user you are logged in as")
        await broker_of(request).delete_user(name)
        sessions_of(request).drop_user(name)
        return f"console user {name!r} deleted"

    return await outcome(request, session, "/access", work)


@router.post("/access/password")
async def change_password(request: Request) -> Response:
    session, form = await posted(request, admin=False)

    async def work() -> str:
        broker = broker_of(request)
        if await views.login(broker, session.user, form.get("current", "")) is None:
            raise InvalidInput("the current password is wrong")
        if form.get("new", "") != form.get("repeat", ""):
            raise InvalidInput("the new passwords differ")
        await broker.set_password(session.user, form.get("new", ""))
        return "password changed"

    return await outcome(request, session, "/access", work)


# ---------------------------------------------------------------------- definitions


@router.post("/definitions")
async def import_(request: Request) -> Response:
    session, form = await posted(request)

    async def work() -> str:
        text = form.get("document", "")
        if not text.strip():
            raise InvalidInput("paste a definitions document (JSON) to import")
        result = await import_definitions(broker_of(request), json_object(text, "the document"))
        created = ", ".join(f"{n} {section}" for section, n in result["created"].items() if n) or "nothing new"
        message = f"imported: created {created}"
        for token in result["tokens"]:
            message += f"; token {token['token']!r}: {token['secret']} (copy it now, it is not shown again)"
        return message

    return await outcome(request, session, "/definitions", work)
