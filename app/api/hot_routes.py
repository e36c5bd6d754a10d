"""The hot routes (publish through an exchange, publish to a queue, pull), served ahead of the app's
middleware stack.

At one message per request, the layers a request passes before its endpoint cost as much as the
endpoint: Starlette's ServerErrorMiddleware, FastAPI's telemetry and body-limit middlewares,
HeadAsGet, Guard, ExceptionMiddleware, AsyncExitStackMiddleware and the router's matching took
a quarter of the server's CPU on a one-message publish and its pull (docs/benchmarks.md, "What
dominates"). A hot request needs two of them: the checks every request passes (app/api/guard.py
`every_request`, one list that the stack's Guard applies too) and the error map. Both are applied
here as the stack applies them, so a hot request is answered exactly as it would be through the
stack; any other method or path goes through the stack.

The routes stay in the app's router too, so OPTIONS, HEAD and 405 `Allow` name them as any route.
Their endpoints are wrapped in their rules (app/api/access.py, `Authorized`), so a hot request is
authorised by the same table as every other, whichever way it comes.
"""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chunkmq.api import publish, pull
from chunkmq.api.errors import api_error, send_error
from chunkmq.api.guard import Check, first_problem

ROUTES: list[Route] = [*publish.routes, pull.route]


class HotRoutes:
    """Matches a request to a hot route and serves it, after `checks` (guard.every_request)."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        self.routes = [(route.path_regex, route.endpoint) for route in ROUTES]

    def match(self, scope: Scope) -> ASGIApp | None:
        """The endpoint of a hot request, with its path parameters put into the scope; None for any
        other request. Starlette's routes match `path` minus `root_path`: a server behind a path
        prefix takes the stack."""
        if scope["method"] != "POST" or scope.get("root_path"):
            return None
        path = scope["path"]
        for regex, endpoint in self.routes:
            found = regex.match(path)
            if found is not None:
                scope["path_params"] = found.groupdict()
                return endpoint
        return None

    async def serve(self, endpoint: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        problem = first_problem(self.checks, "http", scope)
        if problem is not None:
            await send_error(send, *problem)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await endpoint(scope, receive, sending)
        except Exception as exc:
            if started:  # half an answer is out: nothing valid can follow it (uvicorn closes the connection)
                raise
            error = api_error(exc)
            await send_error(send, error.status, error.code, error.message)
