"""/docs (Swagger UI) and /redoc served offline: their scripts and styles come from the installed
`fastapi-offline` package (pinned in pyproject.toml, MIT), not from a CDN, so the pages work on a
machine without internet.

Both pages carry a Content-Security-Policy: scripts from this server plus the page's one inline
script (by its nonce), requests to this server only. Both UIs style themselves at run time (React
style attributes, styled-components), hence `style-src 'unsafe-inline'`; ReDoc's search runs in a
worker made from a blob. ReDoc's bundle shows a logo from cdn.redoc.ly: the copy served here points
it at an inline image instead, so the page requests nothing from another site.
"""

from __future__ import annotations

import functools
import secrets
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
PREFIX = "/docs-assets"
REDOC_JS = "redoc.standalone.js"
_REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_NO_LOGO = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"


def csp(nonce: str) -> str:
    return (
        f"default-src 'none'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self'; connect-src 'self'; worker-src blob:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def _with_csp(page: HTMLResponse) -> HTMLResponse:
    """The page with a nonce on its inline scripts and the policy that allows only them."""
    nonce = secrets.token_urlsafe(16)
    body = bytes(page.body).replace(b"<script>", f'<script nonce="{nonce}">'.encode())
    return HTMLResponse(body, headers={"Content-Security-Policy": csp(nonce), "X-Content-Type-Options": "nosniff",
                                       "Referrer-Policy": "same-origin"})


@functools.cache
def _redoc_js() -> bytes:
    return (ASSETS / REDOC_JS).read_bytes().replace(_REDOC_LOGO, _NO_LOGO)


def install(app: FastAPI) -> None:
    """Needs `FastAPI(docs_url=None, redoc_url=None)`: these routes replace FastAPI's CDN pages."""

    @app.get(f"{PREFIX}/{REDOC_JS}", include_in_schema=False)  # ahead of the mount: its logo rewritten
    async def redoc_js() -> Response:
        return Response(_redoc_js(), media_type="text/javascript")

    app.mount(PREFIX, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return _with_csp(get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js", swagger_css_url=f"{PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{PREFIX}/favicon.png", swagger_ui_parameters={"validatorUrl": None},
        ))

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return _with_csp(get_redoc_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            redoc_js_url=f"{PREFIX}/{REDOC_JS}", redoc_favicon_url=f"{PREFIX}/favicon.png",
            with_google_fonts=False,
        ))
