"""The application factory: wires settings, storage, metadata, broker, API and console together.

`chunkmq serve` starts in two stages (app/start.py): the broker and the hot routes first, then this
app, built while the first requests are answered."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import State
from starlette.types import Receive, Scope, Send

from chunkmq import __version__, web
from chunkmq.alerts.jobs import Alerts
from chunkmq.api import allow, audit, cors, docs, errors, logs, publish, pull, router, schemas
from chunkmq.api.auth import TokenAuth
from chunkmq.api.guard import Guard, every_request
from chunkmq.api.hot_routes import HotRoutes
from chunkmq.api.operations import AlertCollector, BrokerCollector
from chunkmq.auth.bootstrap import bootstrap_admin_token, bootstrap_admin_user
from chunkmq.boot import AppState, check_settings, configure_logging, tune_gc
from chunkmq.broker.audit import AuditLog
from chunkmq.broker.broker import Broker
from chunkmq.broker.tier import ROUND_SECONDS as TIER_ROUND_SECONDS
from chunkmq.broker.tier import Tier
from chunkmq.config import Settings
from chunkmq.http.server import complete_uvicorn
from chunkmq.meta import MetaStore
from chunkmq.meta.audit import AuditRepository
from chunkmq.meta.migrate import upgrade
from chunkmq.metrics import registry
from chunkmq.storage.files import private_dir
from chunkmq.storage.lock import DirectoryLock
from chunkmq.web import render as web_render

log = logging.getLogger("chunkmq")

TOKEN_USE_SECONDS = 5.0  # tokens' last-used times are written behind at most this late
SWEEP_SECONDS = 0.1  # ack-deadline and redelivery granularity
SCHEDULE_FLUSH_SECONDS = 0.2  # delayed messages' due indexes are made durable this often
FORGET_CONSUMERS_SECONDS = 10.0  # consumers unseen for 5 minutes leave the lists this often
DISK_MEASURE_SECONDS = 1.0  # the data directory is walked this often for the disk budget (disk.py)
WARM_UP_DELAY_SECONDS = 1.0  # what start-up left out is loaded this long after the server answers
AUDIT_PRUNE_SECONDS = 3600.0  # audit entries older than CHUNKMQ_AUDIT_DAYS are deleted this often


async def _every(seconds: float, work: Callable[[], Awaitable[object] | object], name: str) -> None:
    """Run `work` forever, `seconds` apart; an error is logged and the loop goes on."""
    while True:
        await asyncio.sleep(seconds)
        try:
            result = work()
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("background task %s failed", name)


async def _later(seconds: float, work: Callable[..., Awaitable[object]], *args: object) -> None:
    await asyncio.sleep(seconds)
    await work(*args)


def warm_up() -> None:
    """Load what the first requests do not need, so that the first request that does (a large publish
    or binary pull: numpy; a stream: the websockets library; a console page: Jinja2 and its
    templates' environment) does not wait for it, then freeze what they built as start-up's objects
    are (tune_gc)."""
    importlib.import_module("numpy")
    complete_uvicorn()  # the package's __init__, left out of `chunkmq serve`'s start (app/http/server.py)
    importlib.import_module("uvicorn.protocols.websockets.websockets_sansio_impl")  # app/http/websocket.py's
    web_render.environment()
    gc.freeze()


class App(FastAPI):
    """FastAPI, except that publish and pull requests are served ahead of its middleware stack
    (app/api/hot_routes.py)."""

    hot_routes: HotRoutes

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = AppState()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (route := self.hot_routes.match(scope)) is not None:
            scope["app"] = self
            await self.hot_routes.serve(route, scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _announce(secret: str | None, what: str) -> None:
    """A secret made at the first start, shown once on stderr (it is also in a file of the data directory)."""
    if secret:
        print(f"chunkmq: created {what}:\n  {secret}", file=sys.stderr, flush=True)


async def open_broker(state: State, settings: Settings) -> None:
    """The metadata store (migrated, with its first admin token and console user), the broker on it
    (the store recovered) and token auth, on `state`: the ORM's way, for `create_app`'s lifespan and
    for a start that must write the metadata (app/start.py)."""
    private_dir(settings.data_dir)
    await asyncio.to_thread(upgrade, settings.meta_url)
    meta = MetaStore(settings.meta_url)
    # First-start secrets before the store opens: the disk budget's first measurement counts them.
    if settings.auth == "on":
        token = await asyncio.to_thread(bootstrap_admin_token, meta, settings.data_dir)
        _announce(token, f"the first admin token (also in {settings.data_dir / 'admin-token'})")
    password = await asyncio.to_thread(bootstrap_admin_user, meta, settings.data_dir)
    _announce(password, f"the console user admin (password also in {settings.data_dir / 'admin-password'})")
    state.meta = meta
    state.broker = await asyncio.to_thread(Broker.open, settings, meta)
    state.auth = TokenAuth(meta, enabled=settings.auth == "on")


@contextlib.asynccontextmanager
async def running(state: State, settings: Settings) -> AsyncIterator[None]:
    """Alerts, metrics and the broker's background work, on an opened broker (`open_broker`, or
    app/start.py's first stage); on the way out, the last writes and the broker and metadata closed."""
    broker: Broker = state.broker
    meta: MetaStore = state.meta
    alerts = Alerts(broker, meta, settings)
    state.alerts = alerts
    audit_log = state.audit = AuditLog(AuditRepository(meta))
    collectors = [BrokerCollector(broker), AlertCollector(alerts)]
    for collector in collectors:
        registry.register(collector)
    await broker.history.load()
    broker.tier = await asyncio.to_thread(Tier.open, settings, broker.store, meta)  # None without a tier
    logs.install()  # uvicorn has configured its loggers by now
    tune_gc()
    tasks = [
        asyncio.create_task(_every(SWEEP_SECONDS, broker.sweep, "sweep")),
        asyncio.create_task(_every(FORGET_CONSUMERS_SECONDS, broker.forget_idle_consumers, "forget consumers")),
        asyncio.create_task(broker.committer.run()),
        asyncio.create_task(broker.run_schedule()),
        asyncio.create_task(_every(SCHEDULE_FLUSH_SECONDS, broker.flush_schedule, "schedule flush")),
        asyncio.create_task(_every(settings.retention_interval_seconds, broker.run_retention, "retention")),
        asyncio.create_task(_every(1.0, broker.stats.sample, "stats")),
        asyncio.create_task(_every(settings.dedup_snapshot_seconds, broker.snapshot_dedup, "dedup snapshot")),
        asyncio.create_task(_every(settings.history_interval_seconds, broker.history.sample, "history sample")),
        asyncio.create_task(_every(settings.history_flush_seconds, broker.history.flush, "history flush")),
        asyncio.create_task(_every(DISK_MEASURE_SECONDS, broker.disk.measure, "disk measure")),
        asyncio.create_task(_every(TOKEN_USE_SECONDS, state.auth.flush_last_used, "token last use")),
        asyncio.create_task(_every(logs.FLUSH_SECONDS, logs.flush, "access log")),
        asyncio.create_task(_every(settings.alert_interval_seconds, alerts.engine.evaluate, "alert evaluation")),
        asyncio.create_task(_every(AUDIT_PRUNE_SECONDS, lambda: audit_log.prune(settings.audit_days), "audit prune")),
        *await alerts.start(),
        asyncio.create_task(_later(WARM_UP_DELAY_SECONDS, asyncio.to_thread, warm_up)),
    ]
    if broker.tier is not None:
        tasks.append(asyncio.create_task(_every(TIER_ROUND_SECONDS, broker.tier.round, "tier upload")))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await alerts.close()
            await broker.committer.round()
            await broker.history.close()
            await state.auth.flush_last_used()
        finally:
            logs.flush()
            for collector in collectors:
                registry.unregister(collector)
            await asyncio.to_thread(broker.close)
            meta.close()


def create_app(settings: Settings | None = None) -> App:
    settings = settings or Settings()
    check_settings(settings)
    configure_logging(settings.log_level)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # `chunkmq serve` takes the directory lock before uvicorn starts; an app run any other way
        # (tests, an ASGI server of the user's choice) takes it here, before touching any file.
        own_lock = getattr(app.state, "dir_lock", None) is None
        if own_lock:
            app.state.dir_lock = DirectoryLock.acquire(settings.data_dir)
        try:
            await open_broker(app.state, settings)
            async with running(app.state, settings):
                yield
        finally:
            if own_lock:
                app.state.dir_lock.release()
                app.state.dir_lock = None

    # /docs and /redoc come from app/api/docs.py, with their assets served locally (no CDN)
    app = App(title="chunkmq", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    errors.install(app)
    docs.install(app)
    # Publish and pull are served ahead of the middleware added here (app/api/hot_routes.py): what
    # every request must pass is the one list of guard.every_request, which both apply.
    checks = every_request(settings)
    if checks:
        app.add_middleware(Guard, checks=checks)
    app.add_middleware(audit.AuditTrail)  # what Guard refuses reaches no route: not recorded
    app.add_middleware(allow.HeadAsGet)
    if settings.cors_allowed:  # outside Guard: its refusals carry the CORS headers too
        app.add_middleware(cors.ApiCors, allowed=settings.cors_allowed)
    hot_routes = [*publish.routes, pull.route]
    app.hot_routes = HotRoutes(checks, hot_routes, cross_origin=bool(settings.cors_allowed))
    app.router.routes.extend(route.in_router() for route in hot_routes)  # OPTIONS, HEAD and 405 name them
    router.install(app)  # every route behind its rule (app/api/access.py)
    web.install(app, settings)  # console pages after the API's routes: /api/v1 is matched first
    app.router.routes.append(allow.route)  # OPTIONS on any path, after every route that has the path
    schemas.install_openapi(app, {**publish.openapi_paths(), **pull.openapi_paths()}, secured=settings.auth == "on")
    return app
