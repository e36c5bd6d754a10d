"""The route class of every console route: errors become an HTML page with the API's answer, and
a request that changes something must come from this console (session.check_same_site).

Any error on a page goes through the API's one error map (app/api/errors.py `api_error`): error.html
shows the same status, code and message the API would answer, so a server-side failure is logged and
shown as a plain sentence, never a trace or a driver's text.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from chunkmq.api.errors import api_error
from chunkmq.web.render import render
from chunkmq.web.session import SESSION_COOKIE, CsrfFailed, LoginRequired, check_same_site, sessions_of


def error_page(request: Request, status: int, message: str, code: str) -> Response:
    session = sessions_of(request).get(request.cookies.get(SESSION_COOKIE))
    return render(request, "error.html", session, status=status, status_code=status, message=message, code=code)


class ConsoleRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def console_handler(request: Request) -> Response:
            try:
                if request.method not in ("GET", "HEAD"):
                    check_same_site(request)  # before anything is read or changed
                return await handler(request)
            except (LoginRequired, CsrfFailed):
                raise  # handled app-wide (app/web/__init__.py)
            except Exception as e:
                error = api_error(e)  # logs a server-side failure with its trace
                return error_page(request, error.status, error.message, error.code)

        return console_handler
