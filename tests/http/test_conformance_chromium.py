"""The conformance suite (tests/http/conformance.py) in a real browser: Debian's headless Chromium
(Playwright) on a page of the broker's own origin, against a real `chunkmq serve` with auth on.
Its `fetch` asks every case hot and through ASGI (both answered alike, every header the page can
read included); then, after those requests, its `WebSocket` consumes and acks on the stream and its
`EventSource` consumes on the events route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.http.conformance import Broker, Sent, broker, comparable, compare_cases


@pytest.fixture(scope="module")
def chunkmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from broker(tmp_path_factory.mktemp("chromium") / "data")


@pytest.fixture(scope="module")
def page(chunkmq: Broker, browser: Browser) -> Iterator[Page]:
    """A page of the broker's origin (its health check), so that `fetch` sees every header."""
    tab = browser.new_page()
    tab.goto(f"{chunkmq.url}/healthz")
    yield tab
    tab.close()


FETCH = """async ([path, body, headers]) => {
  const answer = await fetch(path, {method: "POST", headers, body});
  return [answer.status, Object.fromEntries(answer.headers.entries()), await answer.text()];
}"""


def test_chromium_fetch(chunkmq: Broker, page: Page) -> None:
    queue = chunkmq.queue("chromium-fetch")

    def send(path: str, body: bytes, headers: dict[str, str]) -> Sent:
        status, answered, text = page.evaluate(FETCH, [path, body.decode(), headers])
        return comparable(status, answered, text.encode())

    compare_cases(chunkmq, queue, send)


WEBSOCKET = """async ([queue, token]) => {
  const json = {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"};
  const base = `/api/v1/queues/${queue}`;
  for (const body of ["one", "two"]) {
    await fetch(`${base}/publish`, {method: "POST", headers: json,
      body: JSON.stringify({messages: [{body}]})});
  }
  // a pull of another group on the same connections first: the stream's group still has both
  await fetch(`${base}/groups/other/pull`, {method: "POST", headers: json, body: '{"max_messages":10}'});
  const socket = new WebSocket(`ws://${location.host}${base}/groups/g/stream?consumer=tab&token=${token}`);
  socket.binaryType = "arraybuffer";  // deliveries may come as binary frames: JSON all the same
  const text = (data) => typeof data === "string" ? data : new TextDecoder().decode(data);
  const received = [];
  const acked = await new Promise((resolve, reject) => {
    setTimeout(() => reject(new Error(`timed out with ${received}`)), 10000);
    socket.onerror = () => reject(new Error("websocket error"));
    socket.onopen = () => socket.send(JSON.stringify({type: "credit", n: 10}));
    socket.onmessage = (event) => {
      const frame = JSON.parse(text(event.data));
      if (frame.type === "messages") {
        received.push(...frame.messages.map(m => m.body));
        if (received.length === 2) {
          const last = frame.messages[frame.messages.length - 1].offset;
          socket.send(JSON.stringify({type: "ack", up_to: last + 1, seq: 1}));
        }
      } else if (frame.type === "acked") {
        resolve(frame.ack_floor);
      } else {
        reject(new Error(text(event.data)));
      }
    };
  });
  const closed = new Promise(resolve => { socket.onclose = (event) => resolve(event.code); });
  socket.close(1000);
  return [received, acked, await closed];
}"""


def test_chromium_websocket_after_fetches(chunkmq: Broker, page: Page) -> None:
    queue = chunkmq.queue("chromium-ws")
    assert page.evaluate(WEBSOCKET, [queue, chunkmq.token]) == [["one", "two"], 2, 1000]
    group = httpx.get(f"{chunkmq.url}/api/v1/queues/{queue}/groups/g", headers=chunkmq.auth).json()
    assert (group["ack_floor"], group["in_flight"]) == (2, 0)


EVENTS = """async ([queue, token]) => {
  const json = {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"};
  const base = `/api/v1/queues/${queue}`;
  await fetch(`${base}/publish`, {method: "POST", headers: json,
    body: JSON.stringify({messages: [{body: "a"}, {body: "b"}]})});
  const events = new EventSource(`${base}/groups/g/events?consumer=tab&token=${token}`);
  const got = await new Promise((resolve, reject) => {
    const seen = [];
    setTimeout(() => reject(new Error(`timed out with ${seen}`)), 10000);
    events.onerror = () => reject(new Error(`eventsource error, state ${events.readyState}`));
    events.onmessage = (event) => {
      const message = JSON.parse(event.data);
      seen.push([Number(event.lastEventId), message.offset, message.body]);
      if (seen.length === 2) resolve(seen);
    };
  });
  events.close();
  const acked = await fetch(`${base}/groups/g/ack`, {method: "POST", headers: json,
    body: JSON.stringify({up_to: 2})});
  return [got, (await acked.json()).ack_floor];
}"""


def test_chromium_eventsource(chunkmq: Broker, page: Page) -> None:
    queue = chunkmq.queue("chromium-events")
    got: list[Any] = page.evaluate(EVENTS, [queue, chunkmq.token])
    assert got == [[[0, 0, "a"], [1, 1, "b"]], 2]
