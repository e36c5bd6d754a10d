"""The OpenAPI document tells the truth (answers, error codes, security), and /docs and /redoc work
without internet (in process)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import httpx
import orjson
from playwright.sync_api import expect, sync_playwright

from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.wire import codes
from tests.server import ServerProcess


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


def document(auth: str) -> dict[str, Any]:
    return create_app(Settings(auth=auth)).openapi()


def test_the_document_has_201s_patterns_text_metrics_and_bearer_only_with_tokens() -> None:
    (response,) = get_all("/openapi.json")
    assert "HTTPValidationError" not in response.text
    doc, secured = orjson.loads(response.content), document("on")
    assert "securitySchemes" not in doc["components"]  # auth off: no token to give
    assert secured["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    for path, operations in secured["paths"].items():
        for method, op in operations.items():
            assert ("security" in op) == path.startswith("/api/v1"), (method, path)
            assert "security" not in doc["paths"][path][method]
    assert {"200", "201"} <= doc["paths"]["/api/v1/queues/{name}"]["put"]["responses"].keys()
    (name,) = [p for p in doc["paths"]["/api/v1/queues/{name}"]["put"]["parameters"] if p["name"] == "name"]
    assert name["schema"]["pattern"].startswith("^(?!")
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]


def test_every_route_declares_its_answers_and_error_codes() -> None:
    """A success with its schema (204: no body), and per error status the codes it can answer."""
    for auth in ("on", "off"):
        doc = document(auth)
        for path, operations in doc["paths"].items():
            for method, op in operations.items():
                where = (auth, method, path)
                answers = op["responses"]
                success = [s for s in answers if s.startswith("2")]
                assert success, where
                for status in success:
                    content = answers[status].get("content", {})
                    if status == "204":
                        assert not content, where
                        continue
                    assert content, where
                    for media in content.values():
                        assert media["schema"] not in ({}, None), where
                errors = [s for s in answers if s[0] in "45"]
                assert errors or not path.startswith("/api/v1"), where
                for status in errors:
                    if path == "/readyz" and status == "503":  # {"status": ...}: a readiness answer
                        continue
                    error = answers[status]["content"]["application/json"]["schema"]["properties"]["error"]
                    listed = error["properties"]["code"]["enum"]
                    assert listed and all(codes.STATUS[c] == int(status) for c in listed), (where, status, listed)
                if path.startswith("/api/v1") and auth == "on":
                    assert "unauthorized" in answers["401"]["content"]["application/json"]["schema"][
                        "properties"]["error"]["properties"]["code"]["enum"], where
                assert answers["default"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/Error"}, where
    publish = document("on")["paths"]["/api/v1/exchanges/{name}/publish"]["post"]["responses"]
    assert publish["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Published"}
    assert {"400", "404", "409", "413", "422", "429", "507"} <= publish.keys()


def test_docs_pages_have_a_content_security_policy_and_redoc_asks_no_cdn() -> None:
    docs, redoc, redoc_js = get_all("/docs", "/redoc", "/docs-assets/redoc.standalone.js")
    for page in (docs, redoc):
        policy = page.headers["content-security-policy"]
        nonce = policy.split("'nonce-", 1)[1].split("'", 1)[0]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
        assert page.text.count("<script") == page.text.count(f'nonce="{nonce}"') + page.text.count(" src=")
    assert b"cdn.redoc.ly" not in redoc_js.content and len(redoc_js.content) > 100_000


def test_docs_pages_render_in_a_browser_asking_nothing_of_other_sites(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            requests: list[str] = []
            violations: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(f"{server.url}/docs")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("chunkmq", timeout=30_000)
            page.goto(f"{server.url}/redoc")
            expect(page.locator("h1").first).to_contain_text("chunkmq", timeout=30_000)
            page.wait_for_timeout(500)
            browser.close()
        assert requests and all(u.startswith((server.url, "data:", "blob:")) for u in requests), requests
        assert not violations, violations
    finally:
        server.stop()


def test_the_clients_models_read_fields_the_server_answers() -> None:
    """The client (which imports no server code) keeps its own typed subset of the answers: each of
    its fields is one the server's schema, derived from its views, declares."""
    from chunkmq.client import models

    components = document("off")["components"]["schemas"]
    for model, schema in ((models.QueueInfo, "Queue"), (models.GroupInfo, "Group"), (models.ExchangeInfo, "Exchange"),
                          (models.BindingInfo, "Binding")):
        fields = {f.name for f in dataclasses.fields(model)} - {"raw"}
        properties = components[schema]["properties"].keys()
        assert fields <= properties, (model, fields - properties)
        assert set(components[schema]["required"]) == components[schema]["properties"].keys()
