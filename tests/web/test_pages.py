"""Every console page: renders views, escapes what clients set, pages long lists, serves fragments."""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import insert

from chunkmq.broker import views
from chunkmq.broker.base import now_ms
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.meta import MetaStore, upgrade
from chunkmq.meta import models as m
from chunkmq.web import charts
from tests.web.conftest import Console, admin_password, console_client, login

pytestmark = pytest.mark.anyio

XSS = "<script>alert(1)</script>"
PAGES = ["/", "/exchanges", "/exchanges/amq.default", "/queues", "/groups", "/storage", "/access"]


def assert_no_inline_code(html: str) -> None:
    """Under the CSP nothing inline would run anyway; the pages must not need it."""
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert 'src="/static/' in tag, tag
    assert not re.search(r"\son[a-z]+=", html)
    assert " style=" not in html


async def test_every_page_renders_with_csp(console: Console) -> None:
    for url in PAGES:
        response = await console.get(url)
        assert response.status_code == 200, url
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert_no_inline_code(response.text)
        assert 'href="/queues"' in response.text  # the navigation


async def test_static_assets_are_served(console: Console) -> None:
    for path in ("/static/console.js", "/static/console.css", "/static/vendor/htmx/htmx.min.js",
                 "/static/vendor/uplot/uPlot.iife.min.js", "/static/vendor/uplot/uPlot.min.css"):
        assert (await console.client.get(path)).status_code == 200, path


async def test_the_favicon_is_served_and_linked(console: Console, anon: httpx.AsyncClient) -> None:
    icon = await anon.get("/favicon.ico")  # browsers ask before any login
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    page = (await console.get("/")).text
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    assert (await anon.get("/static/favicon.svg")).content == icon.content


async def test_overview_shows_the_read_model(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("work", {})
    await broker.publish("", [{"body": str(i), "routing_key": "work"} for i in range(7)])
    await broker.pull("work", "billing", 2, 0, "c1")
    page = await console.get("/")
    assert page.template == "overview.html"
    assert page.context["ov"].totals.messages == 7 and page.context["ov"].durability == broker.durability
    assert [(g.queue, g.name) for g in page.context["top"]] == [("work", "billing")]
    assert "Groups with the most lag" in page.text  # the section is drawn only when a group lags
    fragment = await console.get("/", headers={"HX-Request": "true"})
    assert fragment.template == "overview_live.html" and fragment.context["ov"].totals.messages == 7
    # what htmx swaps in: the live element itself, polling again
    assert fragment.text.lstrip().startswith('<div id="live"') and "<html" not in fragment.text
    assert 'hx-trigger="every 2.0s"' in fragment.text


async def test_the_overview_lists_the_groups_with_most_lag_as_sorting_every_group_would(app: FastAPI) -> None:
    broker = app.state.broker
    for i, n in enumerate([3, 5, 5, 1, 0, 5, 2]):
        await broker.declare_queue(f"l{i}", {})
        if n:
            await broker.publish("", [{"body": "x", "routing_key": f"l{i}"}] * n)
        await broker.declare_group(f"l{i}", "g", {})
        await broker.declare_group(f"l{i}", "h", {"start": "latest"})  # lag 0: never listed
    every = sorted((g for q in views.queue_views(broker) for g in q.groups if g.lag > 0),
                   key=lambda g: (g.lag, g.lag_seconds), reverse=True)
    for n in (1, 2, 4, 10):
        assert [(g.queue, g.name) for g in views.lagging_groups(broker, n)] == [(g.queue, g.name) for g in every[:n]]
    assert [g.queue for g in views.lagging_groups(broker, 10)] == ["l1", "l2", "l5", "l0", "l6", "l3"]


async def test_everything_a_client_sets_is_escaped(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("ex", {"type": "topic"})
    await broker.declare_queue("q", {})
    await broker.bind({"exchange": "ex", "queue": "q", "routing_key": XSS})
    await broker.publish("ex", [{"body": XSS, "routing_key": XSS, "tag": XSS, "headers": {XSS: XSS}}])
    await broker.publish("", [{"body": orjson.dumps({"k": XSS}).decode(), "routing_key": "q"}])
    await broker.pull("q", "g", 1, 0, XSS)
    assert XSS in await console.act("/access/tokens", {"name": XSS})
    # a flash quotes what the user typed: the HTML is the point here
    await console.post("/queues", {"name": XSS})
    flashed = (await console.get("/queues")).text
    assert "invalid queue name &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;" in flashed and XSS not in flashed
    for url in ("/queues/q", "/exchanges/ex", "/access", "/groups"):
        html = (await console.get(url)).text
        assert XSS not in html, url
        assert "<script>alert" not in html
    queue_page = (await console.get("/queues/q")).text
    assert queue_page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5  # body, key, tag, header, consumer
    assert "&#34;k&#34;: &#34;&lt;script&gt;" in queue_page  # JSON pretty-printed, then escaped


async def test_message_browser_formats_and_pages(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("b", {})
    await broker.publish("", [{"body": '{"a":1,"b":[2]}', "routing_key": "b"}])
    await broker.publish("", [{"body_base64": "AAEC/w==", "routing_key": "b"}])
    await broker.publish("", [{"body": f"plain {i}", "routing_key": "b"} for i in range(30)])
    page = await console.get("/queues/b?limit=10")
    assert page.template == "queue.html"
    [as_json, as_hex, *_] = messages = page.context["messages"]
    assert (as_json["kind"], as_json["text"]) == ("json", '{\n  "a": 1,\n  "b": [\n    2\n  ]\n}')
    assert (as_hex["kind"], as_hex["size"]) == ("binary", 4) and as_hex["text"].startswith("00000000  00 01 02 ff")
    assert "binary, 4 B" in page.text  # how the page words it
    assert [m["offset"] for m in messages] == list(range(10))
    # the pager's links, as the browser follows them
    assert 'href="/queues/b?offset=10&amp;limit=10#messages" rel="next"' in page.text
    second = await console.get("/queues/b?offset=10&limit=10")
    assert [m["text"] for m in second.context["messages"]] == [f"plain {i}" for i in range(8, 18)]
    assert 'href="/queues/b?offset=0&amp;limit=10#messages" rel="prev"' in second.text
    last = await console.get("/queues/b?offset=30&limit=10")
    assert [m["offset"] for m in last.context["messages"]] == [30, 31] and 'rel="next"' not in last.text
    by_time = await console.get("/queues/b?time=2000-01-01T00:00:00&limit=10")
    assert by_time.context["messages"][0]["offset"] == 0
    future = await console.get("/queues/b?time=2999-01-01T00:00&limit=10")
    assert future.template == "queue.html" and future.context["messages"] == []
    assert "No messages here." in future.text  # the empty state says so
    bad = await console.get("/queues/b?time=yesterday")
    assert bad.status_code == 400 and bad.template == "error.html" and "not a time" in bad.context["message"]


async def test_unknown_queue_is_an_html_404_with_the_api_message(app: FastAPI, console: Console) -> None:
    response = await console.get("/queues/nope")
    assert response.status_code == 404 and response.template == "error.html"
    assert "queue 'nope' not found" in response.context["message"]
    assert "queue &#39;nope&#39; not found" in response.text and "Traceback" not in response.text  # escaped, no leak
    missing = await console.get("/exchanges/nope")
    assert missing.status_code == 404 and missing.template == "error.html"
    await app.state.broker.declare_queue("x", {})
    bad = await console.get("/queues/x?offset=abc")
    assert bad.status_code == 400 and "offset must be a whole number" in bad.context["message"]


async def test_queue_list_filters_sorts_and_pages(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    for i in range(45):
        await broker.declare_queue(f"orders-{i:02d}", {})
    await broker.declare_queue("other", {})
    await broker.publish("", [{"body": "x", "routing_key": "orders-07"}] * 3)
    await broker.publish("", [{"body": "x", "routing_key": "orders-31"}] * 5)
    await broker.pull("orders-31", "g", 1, 0, "c")
    first = await console.get("/queues?filter=orders")  # page size 20 in the fixture
    assert first.template == "queues.html"
    assert [q.name for q in first.context["queues"]] == [f"orders-{i:02d}" for i in range(20)]
    page = first.context["page"]
    assert (page.number, page.pages, page.total) == (1, 3, 45)
    assert "page 1 of 3 (45 in all)" in first.text  # how the page words it
    third = await console.get("/queues?filter=orders&page=3")
    assert [q.name for q in third.context["queues"]] == [f"orders-{i:02d}" for i in range(40, 45)]
    by_messages = await console.get("/queues?sort=messages&order=desc")
    assert [q.name for q in by_messages.context["queues"]][:2] == ["orders-31", "orders-07"]
    by_lag = await console.get("/queues?sort=lag")
    assert by_lag.context["queues"][0].name == "orders-31"
    fragment = await console.get("/queues?filter=orders&page=2", headers={"HX-Request": "true"})
    assert fragment.template == "queues_live.html" and fragment.context["page"].number == 2
    assert 'hx-get="/queues?filter=orders&amp;page=2"' in fragment.text  # htmx polls the same page


async def test_queue_list_sorts_as_the_queues_views_would(app: FastAPI, console: Console) -> None:
    """The sorts read numbers off the broker without building views: their order is the views' own."""
    broker = app.state.broker
    for name, count in (("a", 2), ("b", 5), ("c", 2), ("d", 0), ("e", 2)):
        await broker.declare_queue(name, {})
        if count:
            await broker.publish("", [{"body": "x" * count, "routing_key": name}] * count)
        await asyncio.sleep(0.01)  # a later oldest message: lag ties broken by age
    for name in ("a", "b", "c", "e"):
        await broker.declare_group(name, "g", {"start": "earliest"})
    await broker.declare_group("c", "h", {"start": "latest"})
    views_now = views.queue_views(broker)
    expected = {
        "messages": lambda q: q.messages, "bytes": lambda q: q.bytes, "rate": lambda q: q.messages_in,
        "lag": lambda q: (q.worst_group.lag, q.worst_group.lag_seconds) if q.worst_group else (-1, 0.0),
    }
    for sort, key in expected.items():
        for order in ("asc", "desc"):
            page = await console.get(f"/queues?sort={sort}&order={order}")
            want = [q.name for q in sorted(views_now, key=key, reverse=order == "desc")]
            assert [q.name for q in page.context["queues"]] == want, (sort, order)


async def test_groups_page_sorts_by_lag_and_flags_stalled(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("a", {})
    await broker.declare_queue("b", {})
    await broker.publish("", [{"body": "x", "routing_key": "a"}] * 2)
    await broker.publish("", [{"body": "x", "routing_key": "b"}] * 9)
    await broker.declare_group("a", "slow", {})
    await broker.declare_group("b", "busy", {})
    await broker.pull("b", "busy", 1, 0, "c1")
    page = await console.get("/groups")
    assert page.template == "groups.html"
    busy, slow = page.context["groups"]
    assert [(g.queue, g.name) for g in (busy, slow)] == [("b", "busy"), ("a", "slow")]
    stalled = page.context["stalled"]
    assert stalled(slow)  # lag 2, nothing in flight, no consumer
    assert not stalled(busy)
    ascending = await console.get("/groups?sort=lag&order=asc")
    assert [g.queue for g in ascending.context["groups"]] == ["a", "b"]


async def test_storage_page_lists_chunks_and_index_files(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("s", {})
    await broker.publish("", [{"body": "x" * 100, "routing_key": "s"}] * 20)
    page = await console.get("/storage")
    assert page.template == "storage.html"
    assert [c.state for c in page.context["chunks"]] == ["active"]
    assert [(i.queue, i.files) for i in page.context["indexes"]] == [("s", 1)]


@pytest.fixture
async def ten_thousand_queues() -> AsyncIterator[FastAPI]:
    # tmpfs when there is one: creating 10,000 queue directories fsyncs each, which is not what
    # this test measures.
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", chunk_size=1 << 20, index_chunk_entries=1000)
        upgrade(settings.meta_url)
        with MetaStore(settings.meta_url) as meta, meta.engine.begin() as connection:
            connection.execute(insert(m.Queue), [{"name": f"queue-{i:05d}"} for i in range(10_000)])
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            yield app


async def test_ten_thousand_queues_render_a_page_in_under_a_second(ten_thousand_queues: FastAPI) -> None:
    app = ten_thousand_queues
    broker = app.state.broker
    await broker.publish("", [{"body": "x", "routing_key": "queue-09999"}] * 3)
    await broker.pull("queue-09999", "g", 1, 0, "c")
    async with console_client(app) as client:
        assert (await login(client, "admin", admin_password(app))).status_code == 303
        for url in ("/", "/queues", "/queues?sort=lag", "/queues?sort=messages&page=200", "/queues?filter=queue-0999"):
            # CPU time of this process (the app runs in it): other work on the machine does not count
            started = time.process_time()
            response = await client.get(url)
            elapsed = time.process_time() - started
            assert response.status_code == 200
            assert elapsed < 1.0, f"{url} took {elapsed:.2f} s of CPU"
        top = await client.get("/queues?sort=lag")
        assert top.context["queues"][0].name == "queue-09999"
        assert (top.context["page"].number, top.context["page"].pages, top.context["page"].total) == (1, 200, 10_000)


async def test_charts_come_from_the_history(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("c", {})
    await broker.publish("", [{"body": "x", "routing_key": "c"}] * 4)
    await broker.pull("c", "g1", 1, 0, "c1")
    await broker.history.sample()
    depth = (await console.get("/queues/c/charts.json?chart=depth")).json()
    assert len(depth["t"]) == 1 and depth["series"] == [{"label": "messages", "values": [4.0]}]
    lag = (await console.get("/queues/c/charts.json?chart=lag&range=7d")).json()
    assert [s["label"] for s in lag["series"]] == ["g1 (msgs)"]
    assert lag["series"][0]["values"][-1] == 4.0
    overview = (await console.get("/charts/overview.json?chart=messages")).json()
    assert overview["series"][0]["values"][-1] == 4.0
    await broker.history.flush()  # written to SQLite: the overview sums it there
    overview = (await console.get("/charts/overview.json?chart=messages")).json()
    assert overview["series"][0]["values"] == [4.0]
    bad = await console.get("/queues/c/charts.json?range=1y")
    assert bad.status_code == 400 and "range must be one of 1h, 24h, 7d" in bad.text
    page = (await console.get("/queues/c?range=24h")).text
    assert 'data-src="/queues/c/charts.json?range=24h&amp;chart=lag"' in page


async def test_a_week_chart_draws_no_point_before_the_queue_had_data(app: FastAPI, console: Console) -> None:
    """The week chart averages 14-minute buckets: each is drawn at its first sample, not at a bucket
    start minutes before the queue existed; another queue's points never mix in."""
    broker = app.state.broker
    step_ms = charts.RANGES["7d"] * 1000 // charts.MAX_POINTS
    first = (now_ms() - 2 * step_ms) // step_ms * step_ms + 400_000  # mid-bucket, 20+ min ago
    await broker.declare_queue("late", {})
    await broker.declare_queue("other", {})
    await broker.publish("", [{"body": "x", "routing_key": "late"}] * 200)
    await broker.publish("", [{"body": "y", "routing_key": "other"}] * 5)
    for t in range(first, first + 130_000, 5_000):  # into the third minute: two coarse points written
        await broker.history.sample(now=t)
    await broker.history.flush()
    week = (await console.get("/queues/late/charts.json?range=7d&chart=depth")).json()
    assert week["t"] == [first / 1000]  # one bucket, drawn at its first sample
    assert week["series"][0]["values"] == [200.0]


async def test_counters_say_since_when_and_dead_letters_count_in_their_exchange(
    app: FastAPI, console: Console
) -> None:
    broker = app.state.broker
    await broker.declare_exchange("dlx", {"type": "fanout"})
    await broker.declare_queue("dead", {})
    await broker.bind({"exchange": "dlx", "queue": "dead"})
    await broker.declare_queue("work", {"dead_letter_exchange": "dlx", "max_deliveries": 1})
    await broker.publish("", [{"body": f"job {i}", "routing_key": "work"} for i in range(8)])
    pulled = orjson.loads(await broker.pull("work", "workers", 8, 0, "c"))["messages"]
    broker.nack("work", "workers", {"offsets": [m["offset"] for m in pulled[:6]]})  # 6 dead letters
    queue = await console.get("/queues/work")
    assert queue.context["q"].messages_in == 8
    # each counter says since when, beside it: where the words stand is what these HTML checks are for
    tile = queue.text.split('data-metric="messages_in">')[1].split("</div></div>")[0]
    assert re.match(r"8</div><div class=\"sub\">since start, \d+(\.\d)? s ago;", tile), tile
    exchange = await console.get("/exchanges/dlx")
    assert exchange.context["ex"].messages_in == 6
    assert re.search(r'data-metric="messages_in">6</span> <span class="muted">since start, ', exchange.text)
    listed = await console.get("/exchanges")
    [dlx] = [e for e in listed.context["exchanges"] if e.name == "dlx"]
    assert (dlx.messages_in, dlx.messages_unroutable) == (6, 0)
    assert "since start" in (await console.get("/queues")).text.split("</thead>")[0]


def post_forms(html: str) -> set[str]:
    return set(re.findall(r'<form[^>]*method="post" action="([^"]+)"', html))


async def test_read_only_users_see_no_action_they_cannot_take(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("ex", {"type": "fanout"})
    await broker.declare_queue("work", {})
    await broker.bind({"exchange": "ex", "queue": "work"})
    await broker.pull("work", "g", 1, 0, "c")
    await console.act("/access/users", {"name": "viewer", "password": "viewer-pw-123"})
    pages = [*PAGES, "/exchanges/ex", "/queues/work", "/alerts"]
    admin_forms = {url: post_forms((await console.get(url)).text) for url in pages}
    assert {"/queues/work/purge", "/queues/work/publish", "/bindings/1/delete", "/access/users/viewer/delete",
            "/access/tokens/1/delete"} <= set().union(*admin_forms.values())
    async with console_client(app) as client:
        assert (await login(client, "viewer", "viewer-pw-123")).status_code == 303
        for url in pages:
            page = await client.get(url)
            assert page.status_code == 200, url
            allowed = {"/logout", "/access/password"}
            assert post_forms(page.text) <= allowed, (url, post_forms(page.text) - allowed)
            # the pages they may not open are not offered either
            assert 'href="/definitions"' not in page.text and 'href="/settings"' not in page.text
        assert "/access/password" in post_forms((await client.get("/access")).text)
        queue = (await client.get("/queues/work")).text
        assert "<dt>max_messages</dt><dd class=\"mono\">none</dd>" in queue  # the settings, to read
        for url in ("/definitions", "/settings"):
            assert (await client.get(url)).status_code == 403


async def test_stalled_uses_when_the_floor_last_moved(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("st", {})
    await broker.publish("", [{"body": "x", "routing_key": "st"}] * 3)
    await broker.pull("st", "g", 1, 0, "c1")  # a consumer, one in flight: not stalled by the fallback
    await broker.history.sample(now=1)  # sampled long ago, the floor has not moved since
    page = await console.get("/groups")
    [group] = page.context["groups"]
    assert page.context["stalled"](group)


async def test_definitions_page_exports(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_exchange("dx", {"type": "fanout"})
    await broker.declare_queue("dq", {"max_messages": 5})
    await broker.bind({"exchange": "dx", "queue": "dq"})
    page = await console.get("/definitions")
    assert page.template == "definitions.html"
    assert [page.context["counts"][s] for s in ("exchanges", "queues", "bindings")] == [1, 1, 1]
    assert '"max_messages": 5' in page.context["document"]
    download = await console.get("/definitions.json")
    assert "attachment" in download.headers["content-disposition"]
    assert [q["name"] for q in download.json()["queues"]] == ["dq"]


async def test_access_page_shows_when_a_token_was_last_used(app: FastAPI, console: Console) -> None:
    token = (app.state.settings.data_dir / "admin-token").read_text().strip()
    [bootstrap] = [t for t in (await console.get("/access")).context["tokens"] if t.name == "admin (bootstrap)"]
    assert bootstrap.last_used_at is None
    response = await console.client.get("/api/v1/overview", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    await app.state.auth.flush_last_used()  # written behind (every few seconds), never by the request
    [bootstrap] = [t for t in (await console.get("/access")).context["tokens"] if t.name == "admin (bootstrap)"]
    assert bootstrap.last_used_at is not None


async def test_queue_and_group_pages_show_the_time_to_clear(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("draining", {})
    await broker.declare_queue("filling", {})
    await broker.publish("", [{"body": "x", "routing_key": "draining"}] * 100)
    await broker.publish("", [{"body": "x", "routing_key": "filling"}] * 10)
    await broker.pull("draining", "g", 100, 0, "c")
    await broker.pull("filling", "g", 10, 0, "c")
    t = now_ms()
    await broker.history.sample(t)
    broker.ack("draining", "g", {"up_to": 20})  # 20 in 10 s: 2 a second, 80 left: 40 s
    await broker.publish("", [{"body": "x", "routing_key": "filling"}] * 10)
    await broker.history.sample(t + 10_000)
    page = await console.get("/queues/draining")
    (group,) = page.context["q"].groups
    assert (group.clearing, group.lag_trend, group.time_to_clear_seconds) == ("clearing", -2.0, 40.0)
    assert 'data-clearing="clearing">40 s <span class="muted">(-2/s)</span>' in page.text
    listed = await console.get("/groups")
    assert {(g.queue, g.clearing) for g in listed.context["groups"]} >= {("draining", "clearing"),
                                                                          ("filling", "growing")}
    assert "Time to clear" in listed.text and 'data-clearing="growing">growing' in listed.text


async def test_the_browser_marks_expired_messages_and_the_queue_counts_them(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("ttl", {"message_ttl_seconds": 3600})
    await broker.publish("", [{"body": "gone", "ttl_ms": 1}, {"body": "later"}], queue_name="ttl")
    await asyncio.sleep(0.01)
    page = await console.get("/queues/ttl")
    gone, later = page.context["messages"]
    assert (gone["expired"], later["expired"]) == (True, False)
    assert later["expires_at"] == later["timestamp"] + 3_600_000 and gone["expires_at"] <= gone["timestamp"] + 10
    assert page.text.count('data-expired class="muted"') == 1 and ">expired</span>" in page.text
    await broker.pull("ttl", "g", 10, 0, "c")
    live = (await console.get("/queues/ttl")).text
    assert '<span data-metric="expired">1</span> expired' in live and "1 expired</div>" in live
    assert 'name="message_ttl_seconds" inputmode="numeric" value="3600"' in live


async def test_the_queue_page_shows_scheduled_messages_and_their_due_times(app: FastAPI, console: Console) -> None:
    broker = app.state.broker
    await broker.declare_queue("later", {})
    due = int(time.time() * 1000) + 3_600_000
    await broker.publish("", [{"body": "soon", "routing_key": "later", "deliver_at_ms": due},
                              {"body": "sooner", "routing_key": "later", "deliver_at_ms": due - 1_000}])
    page = await console.get("/queues/later")
    assert [(m["body"], m["deliver_at_ms"]) for m in page.context["scheduled"]] == [("sooner", due - 1_000),
                                                                                  ("soon", due)]
    assert page.context["q"].scheduled == 2 and page.context["q"].next_due_ms == due - 1_000
    assert f'data-due="{due}"' in page.text
    live = await console.get("/queues/later", headers={"HX-Request": "true"})
    assert 'data-metric="scheduled">2<' in live.text and "next due" in live.text
