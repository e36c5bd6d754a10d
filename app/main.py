"""The application factory: wires settings, storage, metadata, broker, API and console together."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import ORJSONResponse

from app import __version__
from app.config import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(title="chunkmq", version=__version__, default_response_class=ORJSONResponse)
    app.state.settings = settings

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
