"""The hot routes (publish through an exchange, publish to a queue, pull), served ahead of the app's
middleware stack, and by `chunkmq serve` ahead of ASGI itself.

At one message per request, the layers a request passes before its endpoint cost as much as the
endpoint: Starlette's ServerErrorMiddleware, FastAPI's telemetry and body-limit middlewares,
HeadAsGet, Guard, ExceptionMiddleware, AsyncExitStackMiddleware and the router's matching took
a quarter of the server's CPU on a one-message publish and its pull (docs/benchmarks.md, "What
dominates"). A hot request needs two of them: the checks every request passes (app/api/guard.py
`every_request`, one list that the stack's Guard applies too) and the error map. Both are applied
here as the stack applies them, so a hot request is answered exactly as it would be through the
stack; any other method or path goes through the stack.

A hot endpoint takes the request's scope and whole body and returns its answer (`Answer`): the app
sends it through ASGI (`HotRoutes.serve`), and `chunkmq serve`'s HTTP protocol (app/http/protocol.py) writes it
straight to the socket, without ASGI's receive/send messages, for a request whose body it already
holds (`HotRoutes.respond`).

The routes stay in the app's router too (`HotRoute.in_router`), so OPTIONS, HEAD and 405 `Allow`
name them as any route. A HotRoute is not a Starlette route itself: a restart's first stage
(app/start.py) serves them without loading Starlette's routing and requests (and anyio under them).
Each is authorised by its rule (app/api/access.py, `rule`), the same table as every other route,
whichever way it comes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from chunkmq.api.access import rule
from chunkmq.api.auth import Principal, bearer
from chunkmq.api.body import header, read_body
from chunkmq.api.errors import api_error, error_body
from chunkmq.api.guard import Check, first_problem
from chunkmq.broker.errors import TooLarge

if TYPE_CHECKING:
    from starlette.routing import Route

#: An answer: (status, content type, body, the other headers)
Answer = tuple[int, bytes, bytes, tuple[tuple[bytes, bytes], ...]]
JSON = b"application/json"
_UNAUTHORIZED = ((b"www-authenticate", b"Bearer"),)
_SEEN_MAX = 1000  # paths whose match HotRoutes keeps


def ok(body: bytes, content_type: bytes = JSON, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    return 200, content_type, body, headers


def refusal(status: int, code: str, message: str) -> Answer:
    """An error in API.md's shape, as errors.send_error sends it."""
    return status, JSON, error_body(code, message), _UNAUTHORIZED if status == 401 else ()


def path_regex(path: str) -> re.Pattern[str]:
    """The regex Starlette's router matches `path` with: each {name} one path segment, the rest literal."""
    parts = re.split(r"\{(\w+)\}", path)  # literal, name, literal, ...
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts))
    return re.compile(f"^{pattern}$")


class HotRoute:
    """A POST route whose endpoint takes (scope, body) and returns its Answer, or an awaitable of it
    when it must wait (a publish waiting for its fsync, a long poll): an answer known at once is
    written without a coroutine (a publish in fsync=interval). `limit(settings)`: the body's largest
    size and the code of its refusal. `eager`: the endpoint may start outside a task (app/http/protocol.py runs
    it at once, in the parser's callback): it uses nothing that needs one, such as `asyncio.timeout`."""

    def __init__(self, path: str, endpoint: Callable[[Scope, bytes], Answer | Awaitable[Answer]],
                 limit: Callable[[Any], tuple[int, str]], *, eager: bool = False) -> None:
        self.path = path
        self.path_regex = path_regex(path)
        self.need = rule("POST", path)
        self.answer = endpoint
        self.limit = limit
        self.eager = eager

    def in_router(self) -> Route:
        """This route as the app's router holds it (a server behind a path prefix is served through it)."""
        from starlette.routing import Route

        return Route(self.path, _ThroughTheStack(self), methods=["POST"])

    def respond(self, scope: Scope, body: bytes | Receive, who: Principal | None = None) -> Answer | Awaitable[Answer]:
        """The answer to a request (its path parameters in the scope): authorised by its rule, then
        its body (`receive` to read it, or the bytes already read) checked and answered; every error
        mapped as the stack's handlers map it. An Answer when nothing had to wait (a known token, a
        body already read, an endpoint that answered at once), else an awaitable of it."""
        try:
            state = scope["app"].state
            if who is None:
                auth = state.auth
                who = auth.known(bearer(header(scope, b"authorization")) if auth.enabled else None)
            if who is None or type(body) is not bytes:
                return self._after_waits(scope, body, who)
            self.need.check(who, scope["path_params"])
            max_bytes, code = self.limit(state.settings)
            if len(body) > max_bytes:
                raise TooLarge(f"the request body is larger than {max_bytes} bytes", code=code)
            answer = self.answer(scope, body)
        except Exception as exc:
            return refused(exc)
        return answer if type(answer) is tuple else _mapped(answer)  # type: ignore[return-value]

    async def _after_waits(self, scope: Scope, body: bytes | Receive, who: Principal | None) -> Answer:
        """`respond` once what it waits for is in: the token's first lookup, the body's bytes."""
        try:
            state = scope["app"].state
            if who is None:
                who = await state.auth.principal(bearer(header(scope, b"authorization")))
            if type(body) is not bytes:
                self.need.check(who, scope["path_params"])  # refused before the body is read
                max_bytes, code = self.limit(state.settings)
                body = await read_body(body, header(scope, b"content-length"), max_bytes, code)
        except Exception as exc:
            return refused(exc)
        return await answer_of(self.respond(scope, body, who))


def refused(exc: Exception) -> Answer:
    """The answer to an endpoint's error, mapped as the stack's handlers map it."""
    error = api_error(exc)
    return refusal(error.status, error.code, error.message)


async def _mapped(pending: Awaitable[Answer]) -> Answer:
    try:
        return await pending
    except Exception as exc:
        return refused(exc)


async def answer_of(answer: Answer | Awaitable[Answer]) -> Answer:
    """The Answer `respond` gave, awaited if it must be."""
    return answer if type(answer) is tuple else await answer  # type: ignore[return-value,misc]


class _ThroughTheStack:
    """A hot route's ASGI endpoint in the router (a server behind a path prefix): the stack's Guard
    has checked the request. (An instance, not a function: Starlette would wrap a function in its
    Request machinery.)"""

    def __init__(self, route: HotRoute) -> None:
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_answer(send, await answer_of(self.route.respond(scope, receive)))


async def send_answer(send: Send, answer: Answer) -> None:
    status, content_type, body, headers = answer
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *headers]})
    await send({"type": "http.response.body", "body": body})


class HotRoutes:
    """Matches a request to a hot route and answers it, after `checks` (guard.every_request)."""

    def __init__(self, checks: list[Check], routes: list[HotRoute], *, cross_origin: bool = False) -> None:
        self.checks = checks
        # CORS is configured (CHUNKMQ_CORS_ORIGINS): a request with an Origin header takes the
        # stack, whose CORS middleware (app/api/cors.py) adds its headers; others stay hot
        self.cross_origin = cross_origin
        self.routes = [(route.path_regex, route) for route in routes]
        # path -> its route and parameters, or None: producers publish to the same few paths, and
        # matching the regexes was about 2 us of a single-message publish
        self._seen: dict[str, tuple[HotRoute, dict[str, Any]] | None] = {}

    def route(self, method: str, path: str) -> tuple[HotRoute, dict[str, Any]] | None:
        """The route of a hot request and its path parameters (the caller's own dict); None for any
        other request."""
        if method != "POST":
            return None
        try:
            found = self._seen[path]
        except KeyError:
            found = self._match(path)
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen[path] = found
        return None if found is None else (found[0], found[1].copy())

    def route_raw(self, raw_path: bytes) -> tuple[HotRoute, dict[str, Any], str] | None:
        """`route` of a POST to `raw_path` as it came in, with the path decoded; None for an escaped
        or non-ASCII path (uvicorn's own path decodes those)."""
        if b"%" in raw_path:
            return None
        try:
            path = raw_path.decode("ascii")
        except UnicodeDecodeError:
            return None
        found = self.route("POST", path)
        return None if found is None else (found[0], found[1], path)

    def _match(self, path: str) -> tuple[HotRoute, dict[str, Any]] | None:
        for regex, route in self.routes:
            found = regex.match(path)
            if found is not None:
                return route, found.groupdict()
        return None

    def match(self, scope: Scope) -> HotRoute | None:
        """The route of a hot ASGI request, with its path parameters put into the scope; None for any
        other request. Starlette's routes match `path` minus `root_path`: a server behind a path
        prefix takes the stack, and so does a request with an Origin header while CORS is configured."""
        if scope.get("root_path"):
            return None
        if self.cross_origin and any(name == b"origin" for name, _ in scope["headers"]):
            return None
        found = self.route(scope["method"], scope["path"])
        if found is None:
            return None
        scope["path_params"] = found[1]
        return found[0]

    def respond(self, route: HotRoute, scope: Scope, body: bytes | Receive) -> Answer | Awaitable[Answer]:
        """The answer (HotRoute.respond's), once the request has passed `checks`."""
        problem = first_problem(self.checks, "http", scope)
        if problem is not None:
            return refusal(*problem)
        return route.respond(scope, body)

    async def serve(self, route: HotRoute, scope: Scope, receive: Receive, send: Send) -> None:
        await send_answer(send, await answer_of(self.respond(route, scope, receive)))
