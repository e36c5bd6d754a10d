"""The route class of every console route: errors become an HTML page with the API's message, and
a request that changes something must come from this console (session.check_same_site).

A broker or metadata error on a page (an unknown queue, a bad parameter) renders error.html with
its status and message; anything unexpected is logged and shown as a plain sentence, never a trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from chunkmq.broker.errors import BrokerError
from chunkmq.meta import MetaError
from chunkmq.meta.errors import NotFound as MetaNotFound
from chunkmq.web.render import render
from chunkmq.web.session import SESSION_COOKIE, CsrfFailed, LoginRequired, check_same_site, sessions_of

log = logging.getLogger("chunkmq.web")


def error_page(request: Request, status: int, message: str) -> Response:
    session = sessions_of(request).get(request.cookies.get(SESSION_COOKIE))
    return render(request, "error.html", session, status=status, status_code=status, message=message)


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
            except BrokerError as e:
                return error_page(request, e.status, e.message)
            except MetaNotFound as e:
                return error_page(request, 404, str(e))
            except MetaError as e:
                return error_page(request, 400, str(e))
            except Exception:
                log.exception("console error on %s %s", request.method, request.url.path)
                return error_page(request, 500, "internal error; see the server log")

        return console_handler
