"""/docs (Swagger UI) and /redoc served offline: their scripts and styles come from the installed
`fastapi-offline` package (pinned in pyproject.toml, MIT), not from a CDN, so the pages work on a
machine without internet."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
PREFIX = "/docs-assets"


def install(app: FastAPI) -> None:
    """Needs `FastAPI(docs_url=None, redoc_url=None)`: these routes replace FastAPI's CDN pages."""
    app.mount(PREFIX, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js", swagger_css_url=f"{PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{PREFIX}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            redoc_js_url=f"{PREFIX}/redoc.standalone.js", redoc_favicon_url=f"{PREFIX}/favicon.png",
            with_google_fonts=False,
        )
