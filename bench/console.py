"""What an open console costs the broker: W1 publish throughput with ten console tabs open vs none.

    .venv/bin/python -m bench.console [--count 1000000] [--repeats 3] [--tabs 10] [--mode browser|http]

Starts a chunkmq server (auth on, its bootstrap token and console user), then alternates runs with no
tab and runs with `--tabs` tabs open, each repeat publishing --count messages of 100 B in batches of
100 (W1's shape) from one keep-alive client process into a fresh queue. The tabs show the overview,
queues, groups and the publishing queue's own page, and refresh as a user's would: `browser` opens
them in Debian's headless Chromium (Playwright), `http` polls the same fragments as htmx does
(HX-Request, every refresh period) without a browser's CPU on the machine. Prints one JSON line per
run, the medians, and the server's CPU (cores busy) over a quiet window with the tabs open vs none.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from bench.adapters.http import HttpJson

BATCH = 100
PAGES = ("/", "/queues", "/groups", "/queues/{queue}", "/exchanges", "/storage")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def publish(port: int, token: str, queue: str, count: int, size: int) -> float:
    """W1: `count` messages in batches of 100; returns msgs/s (run in its own process)."""
    client = HttpJson(port, "/api/v1")
    client.headers["authorization"] = f"Bearer {token}"
    body = {"messages": [{"body": "x" * size}] * BATCH}
    started = time.perf_counter()
    for _ in range(count // BATCH):
        client.json("POST", f"/queues/{queue}/publish", body)
    seconds = time.perf_counter() - started
    client.close()
    return count / seconds


def login(client: httpx.Client, password: str) -> None:
    page = client.get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    client.post("/login", data={"user": "admin", "password": password, "csrf": token.group(1)})


class HttpTabs:
    """Tabs without a browser: each polls its page's live fragment every refresh period."""

    def __init__(self, url: str, password: str, pages: list[str], refresh: float) -> None:
        self.stop = threading.Event()
        self.requests = 0
        self.threads = [threading.Thread(target=self.tab, args=(url, password, p, refresh)) for p in pages]

    def tab(self, url: str, password: str, page: str, refresh: float) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            login(client, password)
            client.get(page)
            while not self.stop.wait(refresh):
                client.get(page, headers={"HX-Request": "true"})
                self.requests += 1

    def __enter__(self) -> HttpTabs:
        for t in self.threads:
            t.start()
        time.sleep(3)  # the logins (a scrypt check each) are done before the measurement starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


class BrowserTabs:
    """Real tabs in headless Chromium, logged in, left open on their pages (htmx polls them)."""

    def __init__(self, url: str, password: str, pages: list[str]) -> None:
        self.url, self.password, self.pages = url, password, pages

    def __enter__(self) -> BrowserTabs:
        from playwright.sync_api import sync_playwright

        self.pw = sync_playwright().start()
        self.browser = self.pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = self.browser.new_context()
        first = context.new_page()
        first.goto(self.url + "/login")
        first.fill('[name="user"]', "admin")
        first.fill('[name="password"]', self.password)
        first.click('button[type="submit"]')
        first.wait_for_url(self.url + "/")
        self.tabs = [first] + [context.new_page() for _ in self.pages[1:]]
        for tab, page in zip(self.tabs, self.pages, strict=True):
            tab.goto(self.url + page)
        time.sleep(3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.browser.close()
        self.pw.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tabs", type=int, default=10)
    p.add_argument("--mode", choices=("browser", "http"), default="browser")
    p.add_argument("--refresh", type=float, default=2.0, help="the console's refresh period (s)")
    p.add_argument("--idle-seconds", type=float, default=20.0, help="quiet window for the server CPU cost")
    p.add_argument("--pages", default=",".join(PAGES), help="comma list of the tabs' pages, used in turn")
    args = p.parse_args()

    data = Path(tempfile.mkdtemp(prefix="chunkmq-console-bench-")) / "data"
    port = free_port()
    env = {**os.environ, "CHUNKMQ_LOG_LEVEL": "warning", "CHUNKMQ_CONSOLE_REFRESH_SECONDS": str(args.refresh)}
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--data-dir", str(data)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200 and (data / "admin-password").exists():
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        token = (data / "admin-token").read_text().strip()
        password = (data / "admin-password").read_text().strip()
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        results: dict[str, list[float]] = {"none": [], "tabs": []}
        with mp.get_context("spawn").Pool(1) as pool:
            for r in range(args.repeats):
                for kind in ("none", "tabs") if r % 2 == 0 else ("tabs", "none"):  # no order bias
                    queue = f"w1-{kind}-{r}"
                    api.put(f"/api/v1/queues/{queue}", json={}).raise_for_status()
                    api.put(f"/api/v1/queues/{queue}/groups/g", json={"start": "earliest"}).raise_for_status()
                    choice = args.pages.split(",")
                    pages = [choice[i % len(choice)].format(queue=queue) for i in range(args.tabs)]
                    tabs: Any
                    if kind == "none":
                        tabs = _Nothing()
                    elif args.mode == "http":
                        tabs = HttpTabs(url, password, pages, args.refresh)
                    else:
                        tabs = BrowserTabs(url, password, pages)
                    with tabs:
                        rate = pool.apply(publish, (port, token, queue, args.count, args.size))
                    results[kind].append(rate)
                    print(orjson.dumps({"run": r, "tabs": 0 if kind == "none" else args.tabs, "mode": args.mode,
                                        "msgs_per_s": round(rate)}).decode(), flush=True)
                    api.delete(f"/api/v1/queues/{queue}?force=true")
            # The cost itself, free of the publish noise: server CPU over a quiet window, tabs open vs not.
            queue = "idle"
            api.put(f"/api/v1/queues/{queue}", json={}).raise_for_status()
            pages = [args.pages.split(",")[i % len(args.pages.split(","))].format(queue=queue) for i in range(args.tabs)]
            proc = psutil.Process(server.pid)
            cpu = {}
            for kind in ("none", "tabs"):
                tabs = _Nothing() if kind == "none" else (
                    HttpTabs(url, password, pages, args.refresh) if args.mode == "http" else BrowserTabs(url, password, pages))
                with tabs:
                    before = sum(proc.cpu_times()[:2])
                    time.sleep(args.idle_seconds)
                    cpu[kind] = (sum(proc.cpu_times()[:2]) - before) / args.idle_seconds
            print(orjson.dumps({"server_cpu_idle": round(cpu["none"], 4), "server_cpu_tabs": round(cpu["tabs"], 4),
                                "tabs": args.tabs, "mode": args.mode}).decode())
        none, with_tabs = statistics.median(results["none"]), statistics.median(results["tabs"])
        print(orjson.dumps({"median_none": round(none), "median_tabs": round(with_tabs), "tabs": args.tabs,
                            "mode": args.mode, "change_pct": round(100 * (with_tabs - none) / none, 1)}).decode())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


class _Nothing:
    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


if __name__ == "__main__":
    main()
