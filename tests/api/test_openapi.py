"""The OpenAPI document tells the truth, and /docs and /redoc work without internet (in process)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from app.config import Settings
from app.main import create_app


def get_all(*paths: str) -> list[httpx.Response]:
    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(Settings(auth="off")))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.get(p) for p in paths]

    return asyncio.run(main())


def test_docs_pages_load_their_assets_from_the_server() -> None:
    docs, redoc = get_all("/docs", "/redoc")
    for page in (docs, redoc):
        assert page.status_code == 200
        assert "cdn." not in page.text and "googleapis" not in page.text, page.text
    assets = [a for a in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css",
                          "/docs-assets/redoc.standalone.js") if a in docs.text + redoc.text]
    assert len(assets) == 3
    for response in get_all(*assets):
        assert response.status_code == 200 and len(response.content) > 10_000


def test_the_document_has_the_error_shape_201s_patterns_text_metrics_and_bearer() -> None:
    (response,) = get_all("/openapi.json")
    doc: dict[str, Any] = orjson.loads(response.content)
    assert "HTTPValidationError" not in response.text
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert op["responses"]["400"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}, (method, path)
            assert ("security" in op) == path.startswith("/api/v1"), (method, path)
    assert {"200", "201"} <= doc["paths"]["/api/v1/queues/{name}"]["put"]["responses"].keys()
    (name,) = [p for p in doc["paths"]["/api/v1/queues/{name}"]["put"]["parameters"] if p["name"] == "name"]
    assert name["schema"]["pattern"].startswith("^(?!")
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
