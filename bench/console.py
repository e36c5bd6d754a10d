"""What an open console costs the broker: W1 publish throughput with ten console tabs open vs none.

    .venv/bin/python -m bench.console [--count 1000000] [--repeats 3] [--tabs 10] [--mode browser|http]

Starts a chunkmq server (auth on, its bootstrap token and console user), then alternates runs with no
tab and runs with `--tabs` tabs open, each repeat publishing --count messages of 100 B in batches of
100 (W1's shape) from one keep-alive client process into a fresh queue. The tabs show the overview,
queues, groups and the publishing queue's own page, and refresh as a user's would: `browser` opens
them in Debian's headless Chromium (Playwright), `http` polls the same fragments as htmx does
(HX-Request, every refresh period) without a browser's CPU on the machine.

On a shared machine a run's rate moves with whatever else runs, so the runs come in pairs (one
without tabs, one with, the order alternating) and the summary gives, besides the medians and the
spread of each kind, the median of the per-pair ratios and the server's CPU per published message
(all its threads), which the machine's load moves far less than the rate. The console's direct
cost is then measured alone: the server's CPU over a quiet window with the tabs open vs none, and
per console request. Prints one JSON line per run, one for the quiet window, and the summary.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
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
    """Tabs without a browser, in one logged-in session as a browser's tabs are: each loads its page,
    then polls the page's live fragment every refresh period."""

    def __init__(self, url: str, password: str, pages: list[str], refresh: float) -> None:
        self.url, self.password, self.pages, self.refresh = url, password, pages, refresh
        self.stop = threading.Event()
        self.requests = 0
        self._lock = threading.Lock()
        self._loaded = threading.Barrier(len(pages) + 1)

    def tab(self, cookies: httpx.Cookies, page: str) -> None:
        with httpx.Client(base_url=self.url, timeout=30, cookies=cookies) as client:
            # As in a browser: only a page with a live fragment polls (htmx's every-N-seconds trigger).
            polls = 'hx-trigger="every' in client.get(page).text
            self._loaded.wait()
            while polls and not self.stop.wait(self.refresh):
                client.get(page, headers={"HX-Request": "true"})
                with self._lock:
                    self.requests += 1

    def __enter__(self) -> HttpTabs:
        # The login (a deliberately slow password check) and the first page loads are over before
        # the measurement starts: what is measured is the tabs left open.
        with httpx.Client(base_url=self.url, timeout=30) as client:
            login(client, self.password)
            cookies = client.cookies
        self.threads = [threading.Thread(target=self.tab, args=(cookies, p)) for p in self.pages]
        for t in self.threads:
            t.start()
        self._loaded.wait()
        time.sleep(0.5)
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
            tab.goto(self.url + page)  # waits for the page's load event
        time.sleep(1)
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
    command = [sys.executable, "-m", "chunkmq.cli", "serve", "--port", str(port), "--data-dir", str(data)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        proc = psutil.Process(server.pid)
        results: dict[str, list[Run]] = {"none": [], "tabs": []}
        loads = [os.getloadavg()[0]]
        with mp.get_context("spawn").Pool(1) as pool:
            for r in range(args.repeats):
                for kind in ("none", "tabs") if r % 2 == 0 else ("tabs", "none"):  # no order bias
                    queue = f"w1-{kind}-{r}"
                    api.put(f"/api/v1/queues/{queue}", json={}).raise_for_status()
                    api.put(f"/api/v1/queues/{queue}/groups/g", json={"start": "earliest"}).raise_for_status()
                    choice = args.pages.split(",")
                    pages = [choice[i % len(choice)].format(queue=queue) for i in range(args.tabs)]
                    tabs = _Nothing() if kind == "none" else open_tabs(args, url, password, pages)
                    with tabs:
                        before = server_cpu(proc)
                        rate = pool.apply(publish, (port, token, queue, args.count, args.size))
                        cpu_us = (server_cpu(proc) - before) / args.count * 1e6
                    results[kind].append(Run(rate, cpu_us))
                    print(orjson.dumps({"run": r, "tabs": 0 if kind == "none" else args.tabs, "mode": args.mode,
                                        "msgs_per_s": round(rate), "server_cpu_us_per_msg": round(cpu_us, 2),
                                        "load": round(os.getloadavg()[0], 1)}).decode(), flush=True)
                    api.delete(f"/api/v1/queues/{queue}?force=true")
            # The cost itself, free of the publish noise: server CPU over a quiet window, tabs open vs not.
            queue = "idle"
            api.put(f"/api/v1/queues/{queue}", json={}).raise_for_status()
            choice = args.pages.split(",")
            pages = [choice[i % len(choice)].format(queue=queue) for i in range(args.tabs)]
            cpu, requests = {}, 0
            for kind in ("none", "tabs"):
                tabs = _Nothing() if kind == "none" else open_tabs(args, url, password, pages)
                with tabs:
                    before, sent = server_cpu(proc), getattr(tabs, "requests", 0)
                    time.sleep(args.idle_seconds)
                    cpu[kind] = (server_cpu(proc) - before) / args.idle_seconds
                    requests = getattr(tabs, "requests", 0) - sent
            line: dict[str, Any] = {"server_cpu_idle": round(cpu["none"], 4), "server_cpu_tabs": round(cpu["tabs"], 4),
                                    "tabs": args.tabs, "mode": args.mode}
            if requests:  # http mode counts the fragment requests
                line["console_requests_per_s"] = round(requests / args.idle_seconds, 2)
                busy = (cpu["tabs"] - cpu["none"]) * args.idle_seconds
                line["server_cpu_ms_per_request"] = round(busy / requests * 1000, 2)
            print(orjson.dumps(line).decode(), flush=True)
        loads.append(os.getloadavg()[0])
        print(orjson.dumps({**summary(results), "tabs": args.tabs, "mode": args.mode,
                            "console_cores": round(cpu["tabs"] - cpu["none"], 4),
                            "load_start_end": [round(x, 1) for x in loads]}).decode())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(data.parent, ignore_errors=True)


@dataclass(frozen=True)
class Run:
    rate: float  # msgs/s
    cpu_us: float  # server CPU per message, all its threads


def server_cpu(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of the server process so far."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def open_tabs(args: argparse.Namespace, url: str, password: str, pages: list[str]) -> HttpTabs | BrowserTabs:
    return HttpTabs(url, password, pages, args.refresh) if args.mode == "http" else BrowserTabs(url, password, pages)


def summary(results: dict[str, list[Run]]) -> dict[str, Any]:
    """Medians and spread (min, max) of each kind, and the median and spread of the ratio tabs / none
    within each pair of runs (a pair runs back to back, so it shares the machine's load)."""
    none, tabs = results["none"], results["tabs"]
    out: dict[str, Any] = {}
    for kind, runs in results.items():
        rates = [r.rate for r in runs]
        out[f"median_{kind}"] = round(statistics.median(rates))
        out[f"range_{kind}"] = [round(min(rates)), round(max(rates))]
        out[f"cpu_us_per_msg_{kind}"] = round(statistics.median(r.cpu_us for r in runs), 2)
    ratios = [t.rate / n.rate for n, t in zip(none, tabs, strict=True)]
    out["change_pct"] = round(100 * (out["median_tabs"] - out["median_none"]) / out["median_none"], 1)
    out["paired_change_pct"] = round(100 * (statistics.median(ratios) - 1), 1)
    out["paired_change_range_pct"] = [round(100 * (min(ratios) - 1), 1), round(100 * (max(ratios) - 1), 1)]
    cpu_none, cpu_tabs = out["cpu_us_per_msg_none"], out["cpu_us_per_msg_tabs"]
    out["cpu_per_msg_change_pct"] = round(100 * (cpu_tabs - cpu_none) / cpu_none, 1)
    return out


class _Nothing:
    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


if __name__ == "__main__":
    main()
