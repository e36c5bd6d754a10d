"""End to end in a real browser: Debian's headless Chromium, driven by Playwright, against a real
server process. Screenshots of every page go to $CHUNKMQ_SCREENSHOTS (`make screenshots` points it at
docs/screenshots/), else to the test's temporary directory."""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import Error as PlaywrightError

from tests.mailbox import Mailbox
from tests.server import ServerProcess

XSS = "<script>alert(1)</script>"
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SMALL = {"width": 360, "height": 740}  # the narrowest screen the console is made for: checked, not shot
# Text that must stay on one line (names, numbers, codes, badges, links of the navigation): the
# texts among them that the browser broke onto two lines; and hex dumps that do not keep one line
# per 16 bytes.
BROKEN = """() => {
  const oneLine = "td.name, td.num, td.mono, .badge, nav.main a, th, .tile .value";
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!node.textContent.trim() || !parent.closest(oneLine) || parent.closest(".help") || !parent.offsetParent) {
      continue;
    }
    const range = document.createRange();
    range.selectNodeContents(node);
    const tops = [...range.getClientRects()].map(r => r.top);
    if (tops.length && Math.max(...tops) - Math.min(...tops) > 8) {
      broken.push(node.textContent.trim().slice(0, 40));
    }
  }
  for (const pre of document.querySelectorAll("pre.body.binary")) {
    const range = document.createRange();
    range.selectNodeContents(pre);
    const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    if (lines.size !== pre.textContent.split("\\n").length) {
      broken.push("hex dump: " + lines.size + " lines");
    }
  }
  return broken;
}"""


@pytest.fixture
def server(tmp_path: Path, mailbox: Mailbox, database_env: Callable[[], dict[str, str]]) -> Iterator[ServerProcess]:
    """With its metadata in SQLite, and in PostgreSQL."""
    proc = ServerProcess(
        tmp_path / "data", CHUNKMQ_CONSOLE_REFRESH_SECONDS="0.5", CHUNKMQ_HISTORY_INTERVAL_SECONDS="0.5",
        CHUNKMQ_HISTORY_FLUSH_SECONDS="1", CHUNKMQ_CHUNK_SIZE="1048576", CHUNKMQ_ALERT_INTERVAL_SECONDS="0.5",
        CHUNKMQ_ALERT_DIGEST_SECONDS="0.2", CHUNKMQ_SMTP_HOST="127.0.0.1", CHUNKMQ_SMTP_PORT=str(mailbox.port),
        CHUNKMQ_SMTP_TO="ops@example.com", **database_env(),
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("CHUNKMQ_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def flash(page: Page) -> str:
    return page.locator(".flash").first.inner_text()


def submit(page: Page, form: str, fields: dict[str, str], *, confirm: bool = False) -> str:
    """Fill a form (selects by value, checkboxes ticked), submit it, return the flash message."""
    scope = page.locator(form.replace("form[", 'form[method="post"][', 1))
    for name, value in fields.items():
        field = scope.locator(f'[name="{name}"]')
        tag = field.evaluate("e => e.tagName + (e.type || '')").lower()
        if tag.startswith("select"):
            field.select_option(value)
        elif tag == "inputcheckbox":
            field.check()
        else:
            field.fill(value)
    if confirm:
        scope.locator('[name="confirm"]').check()
    with page.expect_navigation():
        scope.locator('button[type="submit"]').click()
    return flash(page)


def capture(page: Page, path: Path, *, full_page: bool = False) -> None:
    """A screenshot. Headless Chromium on a loaded machine now and then answers a capture with
    "Unable to capture screenshot" (its compositor gave no frame in time): that error alone is
    retried, after the next frames are drawn; any other error, or a third failure, fails the test."""
    for attempt in range(3):
        try:
            page.screenshot(path=path, full_page=full_page)
            return
        except PlaywrightError as error:
            if "Unable to capture screenshot" not in error.message or attempt == 2:
                raise
            page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def shoot(page: Page, shots: Path, name: str) -> None:
    """Screenshots of the current page on a phone (`<name>-phone.png`) and wide (`<name>.png`), after
    checking that at these sizes and at 360 px the page does not scroll sideways and nothing that must
    stay on one line broke. Ends at the wide size."""
    for viewport, suffix in ((SMALL, None), (PHONE, "-phone"), (WIDE, "")):
        page.set_viewport_size(viewport)
        page.reload()
        expect(page.locator("h1")).to_be_visible()
        charts = page.locator(".chart[data-src]").count()
        if charts:
            expect(page.locator(".chart .uplot")).to_have_count(charts, timeout=5_000)  # drawn by uPlot
        width = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= width[1], f"{name}: the page is {width[0]} px wide on a {width[1]} px screen"
        assert page.evaluate(BROKEN) == [], f"{name} at {viewport['width']} px: broken onto two lines"
        if suffix is not None:
            capture(page, shots / f"{name}{suffix}.png", full_page=True)


def test_console_end_to_end(server: ServerProcess, browser: Browser, shots: Path, mailbox: Mailbox) -> None:
    data = server.data_dir
    password = (data / "admin-password").read_text().strip()
    api = httpx.Client(base_url=server.url, timeout=10,
                       headers={"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"})
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    # Log in (every page redirects to the login first).
    page.goto(server.url + "/queues")
    expect(page).to_have_url(f"{server.url}/login?next=%2Fqueues")
    shoot(page, shots, "login")
    page.fill('[name="user"]', "admin")
    page.fill('[name="password"]', "wrong")
    page.click('button[type="submit"]')
    expect(page.locator(".flash.error")).to_have_text("wrong user name or password")
    page.fill('[name="user"]', "admin")
    page.fill('[name="password"]', password)
    with page.expect_navigation():
        page.click('button[type="submit"]')
    expect(page).to_have_url(server.url + "/queues")

    # Declare exchanges and queues.
    page.goto(server.url + "/exchanges")
    assert "declared" in submit(page, 'form[action="/exchanges"]', {"name": "orders", "type": "topic"})
    assert "declared" in submit(page, 'form[action="/exchanges"]', {"name": "dlx", "type": "fanout"})
    page.goto(server.url + "/queues")
    assert "declared" in submit(page, 'form[action="/queues"]', {
        "name": "orders-eu", "dead_letter_exchange": "dlx", "max_deliveries": "1"})
    expect(page).to_have_url(server.url + "/queues/orders-eu")
    page.goto(server.url + "/queues")
    assert "declared" in submit(page, 'form[action="/queues"]', {"name": "dead"})

    # Bind: from the exchange's page, and from the queue's.
    page.goto(server.url + "/exchanges/orders")
    assert "bound" in submit(page, 'form[action="/bindings"]', {"queue": "orders-eu", "routing_key": "eu.#"})
    expect(page.locator("td.mono", has_text="eu.#")).to_be_visible()
    page.goto(server.url + "/queues/dead")
    assert "bound" in submit(page, 'form[action="/bindings"]', {"exchange": "dlx"})

    # Publish a test message through the exchange and see it, escaped, in the browser.
    page.goto(server.url + "/queues/orders-eu")
    result = submit(page, 'form[action$="/publish"]', {
        "exchange": "orders", "routing_key": "eu.1", "body": '{"order": 1, "note": "' + XSS.replace('"', "") + '"}',
        "tag": XSS})
    assert "to 'orders-eu' at offset 0" in result
    row = page.locator('tr[data-offset="0"]')
    expect(row.locator("pre.body")).to_contain_text('"order": 1')
    expect(row.locator(".badge")).to_have_text(XSS)  # the tag, shown as text

    # A consumer group with lag; a consumer drains it while the page (not reloaded) watches.
    api.post("/api/v1/exchanges/orders/publish",
             json={"messages": [{"body": f"m{i}", "routing_key": "eu.x"} for i in range(40)]}).raise_for_status()
    api.put("/api/v1/queues/orders-eu/groups/billing", json={"start": "earliest"}).raise_for_status()
    page.goto(server.url + "/queues/orders-eu")
    page.evaluate("window.notReloaded = true")
    lag = page.locator('tr[data-group="billing"] [data-metric="lag"]')
    expect(lag).to_have_text("41")

    def consume() -> None:
        acked = None
        for _ in range(50):
            body = {"max_messages": 5, "consumer": "worker-1", **({"ack": {"up_to": acked}} if acked else {})}
            got = api.post("/api/v1/queues/orders-eu/groups/billing/pull", json=body).json()["messages"]
            if not got:
                api.post("/api/v1/queues/orders-eu/groups/billing/ack", json={"up_to": acked}).raise_for_status()
                return
            acked = got[-1]["offset"] + 1
            time.sleep(0.15)

    consumer = threading.Thread(target=consume)
    consumer.start()
    expect(lag).not_to_have_text("41", timeout=10_000)  # falling, live
    expect(lag).to_have_text("0", timeout=20_000)
    consumer.join()
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator('tr[data-group="billing"]')).to_contain_text("worker-1")

    # Seek the group back to the start: its lag is back.
    assert "now at offset 0" in submit(page, 'form[action$="/seek"]', {"group": "billing", "to": "earliest"})
    expect(page.locator('tr[data-group="billing"] [data-metric="lag"]')).to_have_text("41")

    # Dead-letter one message (max_deliveries 1, nacked), then redrive it back from the DLQ's page.
    got = api.post("/api/v1/queues/orders-eu/groups/failing/pull", json={"max_messages": 1}).json()["messages"]
    api.post("/api/v1/queues/orders-eu/groups/failing/nack",
             json={"offsets": [got[0]["offset"]]}).raise_for_status()
    page.goto(server.url + "/queues/dead")
    expect(page.locator('tr[data-offset="0"]')).to_contain_text("x-death-queue")
    shoot(page, shots, "queue-dead-letters")
    assert "moved 1 (1 to 'orders-eu')" in submit(page, 'form[action$="/redrive"]', {})
    expect(page.locator("table.messages")).to_contain_text("No messages here.")
    assert api.get("/api/v1/queues/orders-eu").json()["next_offset"] == 42

    # A binary message: its hex dump keeps one line per 16 bytes, wide and on a phone.
    api.put("/api/v1/queues/shipping-notifications", json={}).raise_for_status()
    api.post("/api/v1/exchanges/amq.default/publish", json={"messages": [{
        "routing_key": "shipping-notifications", "body_base64": base64.b64encode(bytes(range(256)) * 2).decode(),
        "headers": {"content-type": "application/octet-stream"}}]}).raise_for_status()
    page.goto(server.url + "/queues/shipping-notifications")
    expect(page.locator("pre.body.binary")).to_contain_text("00000000  00 01 02 03")
    shoot(page, shots, "queue-binary")

    # An alert rule from the Alerts page: the billing group's lag (41 since the seek) fires it, and
    # its mail reaches the SMTP server; the page shows the alert firing and the mail sent.
    page.goto(server.url + "/alerts")
    assert "created" in submit(page, 'form[action="/alerts/rules"]', {
        "kind": "lag_messages", "threshold": "10", "queue": "orders-*", "group": "billing"})
    [mail] = mailbox.wait_for(1)
    assert mail.subject.startswith("[chunkmq] FIRING lag_messages orders-eu/billing")
    page.goto(server.url + "/alerts")
    expect(page.locator("table").first).to_contain_text("orders-eu")
    expect(page.locator("table").first.locator(".badge.bad")).to_have_text("firing")

    # Screenshots of every page, after some history has been sampled for the charts.
    time.sleep(1.5)
    for name, path in (("overview", "/"), ("exchanges", "/exchanges"), ("exchange", "/exchanges/orders"),
                       ("queues", "/queues"), ("groups", "/groups"), ("storage", "/storage"),
                       ("access", "/access"), ("definitions", "/definitions"), ("alerts", "/alerts"),
                       ("settings", "/settings")):
        page.goto(server.url + path)
        shoot(page, shots, name)
    page.goto(server.url + "/queues/orders-eu?limit=10")
    expect(page.locator(".chart .uplot")).to_have_count(4, timeout=5_000)
    shoot(page, shots, "queue")

    # On a phone the navigation folds behind the Menu button, and opens inside the dark header.
    page.set_viewport_size(PHONE)
    page.goto(server.url + "/")
    header, menu = page.locator("header.top"), page.locator("header.top button.menu")
    queues = page.locator('nav.main a[href="/queues"]')
    expect(menu).to_be_visible()
    expect(queues).to_be_hidden()
    menu.click()
    expect(queues).to_be_visible()
    capture(page, shots / "menu-phone.png")
    box, inside = header.bounding_box(), page.locator("header.top div.menu").bounding_box()
    assert box and inside and inside["y"] + inside["height"] <= box["y"] + box["height"]  # on the dark background
    assert inside["x"] + inside["width"] <= PHONE["width"]
    with page.expect_navigation():
        queues.click()
    expect(page.locator("h1")).to_have_text("Queues")
    page.set_viewport_size(WIDE)
    page.goto(server.url + "/")
    expect(menu).to_be_hidden()
    expect(queues).to_be_visible()

    # Delete: refused without the confirmation box (the browser will not submit), done with it.
    page.goto(server.url + "/queues/dead")
    page.locator('form[action="/queues/dead/delete"] button').click()
    expect(page.locator('form[action="/queues/dead/delete"] [name="confirm"]:invalid')).to_have_count(1)
    expect(page).to_have_url(server.url + "/queues/dead")
    assert api.get("/api/v1/queues/dead").status_code == 200
    assert "deleted" in submit(page, 'form[action="/queues/dead/delete"]', {"force": "yes"}, confirm=True)
    expect(page).to_have_url(server.url + "/queues")
    expect(page.locator("table")).not_to_contain_text("dead")

    # Log out: the pages are closed again.
    with page.expect_navigation():
        page.click("header form button")
    page.goto(server.url + "/")
    expect(page).to_have_url(f"{server.url}/login?next=%2F")

    assert dialogs == []  # no script from a message ever ran
    assert [e for e in errors if "Content Security Policy" in e] == []
    context.close()
    api.close()
