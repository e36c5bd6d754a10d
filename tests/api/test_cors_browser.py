"""A web app on another origin, in a real browser: Debian's headless Chromium (Playwright) on a page
served by a tiny http.server, against a real `chunkmq serve` with CHUNKMQ_CORS_ORIGINS naming that
page's origin. The page publishes, pulls and acks with fetch and consumes by EventSource, running
docs/client.md's browser example as printed there; a page on an origin not listed is refused."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.server import ServerProcess

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "client.md"


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>app</title><p>app</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[int]:
    """The web app's server: http://127.0.0.1:<port> is the listed origin, http://localhost:<port>
    (another origin, same page) the one that is not."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def broker(site: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("cors-browser")) / "data"
    proc = ServerProcess(data, CHUNKMQ_CORS_ORIGINS=f"http://127.0.0.1:{site}", CHUNKMQ_CHUNK_SIZE="1048576").start()
    yield proc
    proc.stop()


def _token(broker: ServerProcess) -> str:
    return (broker.data_dir / "admin-token").read_text().strip()


def _open(browser: Browser, url: str) -> tuple[Page, list[str]]:
    page = browser.new_page()
    logged: list[str] = []
    page.on("console", lambda message: logged.append(message.text))
    page.goto(url)
    return page, logged


def _wait(page: Page, done: Any, timeout: float = 10.0) -> None:
    """Until done() holds; the page's events (console lines) come in while Playwright waits."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(50)


def test_the_guides_browser_example_publishes_consumes_and_acks(browser: Browser, broker: ServerProcess,
                                                                site: int) -> None:
    (example,) = re.findall(r"^```js\n(.*?)^```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    example = example.replace('"http://127.0.0.1:8000"', f'"{broker.url}"').replace('"cmq_..."', f'"{_token(broker)}"')
    page, logged = _open(browser, f"http://127.0.0.1:{site}/")
    try:
        page.evaluate(f"async () => {{ {example}\n window.events = events; }}")
        _wait(page, lambda: len([t for t in logged if t.startswith("received")]) >= 2)
        assert [t for t in logged if t.startswith("received")] == ["received 0 hello", "received 1 world"]
        api = httpx.Client(base_url=f"{broker.url}/api/v1", headers={"authorization": f"Bearer {_token(broker)}"})

        def group() -> dict[str, Any]:
            return {g["name"]: g for g in api.get("/queues/web-demo/groups").json()}["web"]

        _wait(page, lambda: group()["ack_floor"] == 2)  # the page's acks, sent with fetch
        assert group()["in_flight"] == 0
        # the broker ends the stream: the example's error listener reads the error event
        assert api.delete("/queues/web-demo/groups/web").status_code == 204
        _wait(page, lambda: any("was deleted" in t for t in logged))
        assert page.evaluate("() => window.events.readyState") == 2  # CLOSED: it closed itself
    finally:
        page.close()


PULL_AND_ACK = """async ([broker, token]) => {
  const json = {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"};
  const queue = `${broker}/api/v1/queues/page-pull`;
  const out = [];
  out.push((await fetch(queue, {method: "PUT", headers: json, body: "{}"})).status);
  const published = await fetch(`${queue}/publish`, {method: "POST", headers: json,
    body: JSON.stringify({messages: [{body: "p"}]})});
  out.push(published.status);
  const pulled = await fetch(`${queue}/groups/g/pull`, {method: "POST", headers: json,
    body: JSON.stringify({max_messages: 10})});
  const messages = (await pulled.json()).messages;
  out.push(messages.map(m => m.body).join());
  const acked = await fetch(`${queue}/groups/g/ack`, {method: "POST", headers: json,
    body: JSON.stringify({up_to: messages[0].offset + 1})});
  out.push((await acked.json()).ack_floor);
  const refused = await fetch(`${queue}/groups/g/pull`, {method: "POST",
    headers: {...json, "Authorization": "Bearer wrong"}, body: "{}"});
  out.push(refused.status, (await refused.json()).error.code);  // an error the page can read
  return out;
}"""


def test_a_page_on_a_listed_origin_pulls_and_acks(browser: Browser, broker: ServerProcess, site: int) -> None:
    page, _ = _open(browser, f"http://127.0.0.1:{site}/")
    try:
        assert page.evaluate(PULL_AND_ACK, [broker.url, _token(broker)]) == [201, 200, "p", 1, 401, "unauthorized"]
    finally:
        page.close()


REFUSED = """async ([broker, token]) => {
  const out = [];
  try {
    await fetch(`${broker}/api/v1/queues/page-refused/publish`, {method: "POST",
      headers: {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"},
      body: JSON.stringify({messages: [{body: "from elsewhere"}]})});
    out.push("published");
  } catch (e) {
    out.push(e.name);
  }
  const events = new EventSource(`${broker}/api/v1/queues/page-refused/groups/g/events?token=${token}`);
  out.push(await new Promise(resolve => {
    events.onmessage = () => resolve("message");
    events.onerror = () => resolve(events.readyState === EventSource.CLOSED ? "closed" : "retrying");
  }));
  return out;
}"""


def test_a_page_on_an_origin_not_listed_is_refused(browser: Browser, broker: ServerProcess, site: int) -> None:
    api = httpx.Client(base_url=f"{broker.url}/api/v1", headers={"authorization": f"Bearer {_token(broker)}"})
    assert api.put("/queues/page-refused", json={}).status_code == 201
    assert api.post("/queues/page-refused/publish", json={"messages": [{"body": "here"}]}).status_code == 200
    page, _ = _open(browser, f"http://localhost:{site}/")  # the same page under another origin
    try:
        assert page.evaluate(REFUSED, [broker.url, _token(broker)]) == ["TypeError", "closed"]
    finally:
        page.close()
    bodies = [m["body"] for m in api.get("/queues/page-refused/messages").json()["messages"]]
    assert bodies == ["here"]  # the preflight failed: the publish was never sent
    # the EventSource's GET needs no preflight: it reached the server, whose answer the browser hid
    group = api.get("/queues/page-refused/groups/g").json()
    assert group["in_flight"] <= 1
