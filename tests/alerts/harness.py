"""The whole app in-process (lifespan running, requests over httpx.ASGITransport), with the alert
engine driven by hand at chosen times, so `for` durations of minutes take no time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from chunkmq.alerts.jobs import Alerts
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.meta.alerts import AlertEventRow

T0 = 1_900_000_000_000  # a fixed epoch ms the tests count from


def settings(data_dir: Path, smtp_port: int, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir, "auth": "off", "chunk_size": 1 << 20, "index_chunk_entries": 1000,
        # the tests call evaluate() and history.sample() themselves, at the times they choose
        "alert_interval_seconds": 3600, "history_interval_seconds": 3600, "alert_digest_seconds": 0.05,
        "smtp_host": "127.0.0.1", "smtp_port": smtp_port, "smtp_to": "ops@example.com",
        "smtp_retry_seconds": 0.05, "smtp_timeout_seconds": 2, "console_url": "http://console.test:8080",
    }
    return Settings(**{**values, **overrides})


@dataclass
class Running:
    app: FastAPI
    http: httpx.AsyncClient

    @property
    def alerts(self) -> Alerts:
        alerts: Alerts = self.app.state.alerts
        return alerts

    async def call(self, method: str, path: str, status: int | tuple[int, ...] = (200, 201), **kw: Any) -> Any:
        r = await self.http.request(method, path, **kw)
        assert r.status_code in ((status,) if isinstance(status, int) else status), f"{r.status_code} {r.text}"
        return r.json() if r.content else None

    async def rule(self, **body: Any) -> int:
        return int((await self.call("POST", "/api/v1/alerts/rules", json=body))["id"])

    async def queue(self, name: str, *groups: str, **settings: Any) -> None:
        await self.call("PUT", f"/api/v1/queues/{name}", json=settings)
        for g in groups:
            await self.call("PUT", f"/api/v1/queues/{name}/groups/{g}", json={"start": "earliest"})

    async def publish(self, queue: str, n: int) -> None:
        await self.call("POST", f"/api/v1/queues/{queue}/publish", json={"messages": [{"body": "m"}] * n})

    async def pull(self, queue: str, group: str, n: int = 1000) -> list[int]:
        body = {"max_messages": n, "consumer": "c1"}
        got = await self.call("POST", f"/api/v1/queues/{queue}/groups/{group}/pull", json=body)
        return [m["offset"] for m in got["messages"]]

    async def ack(self, queue: str, group: str, up_to: int) -> None:
        await self.call("POST", f"/api/v1/queues/{queue}/groups/{group}/ack", json={"up_to": up_to})

    async def tick(self, at_ms: int) -> None:
        """History sample and alert evaluation at `at_ms`, then the mails out (waited for)."""
        await self.app.state.broker.history.sample(at_ms)
        await self.alerts.engine.evaluate(at_ms)
        await self.alerts.outbox.drain()

    def firing(self) -> list[tuple[str, str, str]]:
        return [(a.kind, a.queue, a.group) for a in self.alerts.firing()]

    def events(self, **filters: Any) -> list[AlertEventRow]:
        """Oldest first."""
        return list(reversed(self.alerts.repo.events(**filters)))


@contextlib.asynccontextmanager
async def running(settings: Settings, clear_rules: bool = True) -> AsyncIterator[Running]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            run = Running(app, http)
            if clear_rules:  # the default rules of a new install would only get in the way
                for rule in await run.call("GET", "/api/v1/alerts/rules"):
                    await run.call("DELETE", f"/api/v1/alerts/rules/{rule['id']}", status=204)
            yield run
