"""The queue page's Search tab (app/web/search.py): in process (template and context, the form as the
API's body, paging by the "more" link, a message opened whole, errors, escaping), and in headless
Chromium against a real server."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, expect

from chunkmq.web.search import highlight, request_body
from tests.server import ServerProcess
from tests.web.conftest import Console

XSS = "<script>alert(1)</script>"


async def _fill(app: FastAPI) -> None:
    broker = app.state.broker
    await broker.declare_queue("q", {})
    messages = [{"body": f"order {i} {'eu' if i % 2 == 0 else 'us'}", "routing_key": f"orders.{i % 3}",
                 "headers": {"n": str(i)}, "tag": "t" if i % 4 == 0 else None} for i in range(60)]
    messages.append({"body": XSS, "routing_key": "x", "headers": {"h": XSS}})
    messages.append({"body_base64": base64.b64encode(b"\x00\x01" * 3000).decode(), "routing_key": "bin"})
    await broker.publish("", messages, queue_name="q")


def test_the_form_becomes_the_apis_body() -> None:
    assert request_body({"body": "a", "regex": "b+", "json_path": "$.a > 1", "ignore_case": "1", "header": "h",
                         "header_value": "",
                         "routing_key": "o.", "routing_key_match": "prefix", "tag": "t", "tag_match": "equals",
                         "from_offset": "3", "to_time": "1970-01-01T00:00:01", "limit": "10"}) == {
        "limit": 10, "body_contains": "a", "body_regex": "b+", "ignore_case": True, "json_path": "$.a > 1",
        "header_exists": ["h"],
        "routing_key_prefix": "o.", "tag": "t", "from_offset": 3, "to_timestamp": 1000}
    assert request_body({"header": "h", "header_value": "v", "cursor": "c"}) == {"limit": 25, "cursor": "c"}
    assert request_body({"header": "h", "header_value": "v"})["header_equals"] == {"h": "v"}


@pytest.mark.anyio
async def test_a_search_pages_by_its_more_link_and_opens_a_message_whole(app: FastAPI, console: Console) -> None:
    await _fill(app)
    empty = await console.get("/queues/q/search")
    assert empty.status_code == 200 and empty.template == "queue_search.html"  # type: ignore[attr-defined]
    assert empty.context["result"] is None  # type: ignore[attr-defined]
    assert 'href="/queues/q/search"' in (await console.get("/queues/q")).text  # the tab on the queue page
    params = {"run": "1", "body": "EU", "ignore_case": "1", "routing_key": "orders.0", "limit": "10"}
    r = await console.get("/queues/q/search", params=params)
    result = r.context["result"]  # type: ignore[attr-defined]
    assert [m.offset for m in result.messages] == [0, 6, 12, 18, 24, 30, 36, 42, 48, 54]
    assert result.stopped == "limit" and r.context["more"]  # type: ignore[attr-defined]
    more = parse_qs(r.context["more"])  # type: ignore[attr-defined]
    assert more["body"] == ["EU"] and more["cursor"]
    r = await console.get("/queues/q/search?" + r.context["more"])  # type: ignore[attr-defined]
    assert [m.offset for m in r.context["result"].messages] == []  # type: ignore[attr-defined]
    assert r.context["result"].stopped == "end" and r.context["more"] is None  # type: ignore[attr-defined]
    # the binary message opened whole: every byte in the hex dump, not the browser's first 4 KiB
    r = await console.get("/queues/q/search", params={"run": "1", "routing_key": "bin", "open": "61"})
    opened = r.context["opened"]  # type: ignore[attr-defined]
    assert opened["kind"] == "binary" and not opened["truncated"] and opened["text"].count("\n") == 6000 // 16 - 1
    assert [m["offset"] for m in r.context["messages"]] == [61]  # type: ignore[attr-defined]
    link = re.search(r'href="\?([^"#]*)#message"', r.text)
    assert link and "open=61" in link.group(1).replace("&amp;", "&")


@pytest.mark.anyio
async def test_errors_are_shown_with_the_field_and_text_is_escaped(app: FastAPI, console: Console) -> None:
    await _fill(app)
    r = await console.get("/queues/q/search", params={"run": "1", "regex": "(a"})
    assert r.status_code == 400 and "body_regex" in r.context["error"]  # type: ignore[attr-defined]
    assert 'data-code="invalid_body"' in r.text and 'value="(a"' in r.text
    r = await console.get("/queues/q/search", params={"run": "1", "from_offset": "x"})
    assert r.status_code == 400 and "from_offset" in r.context["error"]  # type: ignore[attr-defined]
    r = await console.get("/queues/q/search", params={"run": "1", "body": XSS, "open": "60"})
    assert [m["offset"] for m in r.context["messages"]] == [60]  # type: ignore[attr-defined]
    assert XSS not in r.text and "<mark>&lt;script&gt;alert(1)&lt;/script&gt;</mark>" in r.text  # marked, escaped
    assert (await console.get("/queues/nope/search")).status_code == 404


@pytest.mark.anyio
async def test_the_page_needs_a_login(app: FastAPI, anon: httpx.AsyncClient) -> None:
    await _fill(app)
    r = await anon.get("/queues/q/search", params={"run": "1"})
    assert r.status_code in (302, 303) and "/login" in r.headers["location"]


def test_a_search_in_chromium(tmp_path: Path, browser: Browser) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_CHUNK_SIZE="1048576").start()
    try:
        token = (server.data_dir / "admin-token").read_text().strip()
        password = (server.data_dir / "admin-password").read_text().strip()
        with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"}) as api:
            assert api.put("/api/v1/queues/orders").status_code == 201
            messages = [{"body": f'{{"order": {i}, "customer": "c-{i % 5}"}}', "routing_key": f"orders.{i % 2}",
                         "headers": {"region": "eu" if i % 3 == 0 else "us"}} for i in range(40)]
            assert api.post("/api/v1/queues/orders/publish", json={"messages": messages}).status_code == 200
        page = browser.new_page()
        page.goto(f"{server.url}/login")
        page.fill('input[name="user"]', "admin")
        page.fill('input[name="password"]', password)
        with page.expect_navigation():
            page.click('button[type="submit"]')
        page.goto(f"{server.url}/queues/orders")
        with page.expect_navigation():
            page.click('nav.tabs a:has-text("Search")')
        assert urlsplit(page.url).path == "/queues/orders/search"
        page.fill('input[name="json_path"]', '$.customer == "c-2"')
        page.fill('input[name="header"]', "region")
        page.fill('input[name="header_value"]', "eu")
        with page.expect_navigation():
            page.click('button[name="run"]')
        rows = page.locator("#results table.messages tbody tr")
        expect(rows).to_have_count(2)  # customer c-2 (i % 5 == 2) in the eu region (i % 3 == 0)
        assert [rows.nth(i).get_attribute("data-offset") for i in range(2)] == ["12", "27"]
        expect(page.locator('[data-metric="scanned"]')).to_contain_text("40 messages looked at")
        with page.expect_navigation():
            rows.first.locator('a:has-text("open")').click()
        expect(page.locator("#message h2")).to_contain_text("Message 12")
        expect(page.locator("#message pre.body.json")).to_contain_text('"customer": "c-2"')
        assert page.input_value('input[name="header_value"]') == "eu"  # the form keeps the search
        page.fill('input[name="json_path"]', "")
        page.fill('input[name="body"]', "C-2")
        page.check('input[name="ignore_case"]')
        with page.expect_navigation():
            page.click('button[name="run"]')
        expect(page.locator("#results pre.body mark")).to_have_count(2)
        expect(page.locator("#results pre.body mark").first).to_have_text("c-2")  # the body's own case
    finally:
        server.stop()


@pytest.mark.parametrize(("text", "needle", "ignore_case", "pattern", "expected"), [
    ("abcabc", "b", False, "", [("a", False), ("b", True), ("ca", False), ("b", True), ("c", False)]),
    ("aBc", "b", True, "", [("a", False), ("B", True), ("c", False)]),
    ("aBc", "b", False, "", [("aBc", False)]),
    ("order 17", "", False, "[0-9]+", [("order ", False), ("17", True)]),
    ("abcd", "bc", False, "cd", [("a", False), ("bc", True), ("d", True)]),  # overlapping: each character once
    ("", "x", False, "", [("", False)]),
    ("xx", "", False, "(", [("xx", False)]),  # a pattern RE2 refuses marks nothing
])
def test_highlight(text: str, needle: str, ignore_case: bool, pattern: str,
                   expected: list[tuple[str, bool]]) -> None:
    assert highlight(text, needle, ignore_case, pattern) == expected
