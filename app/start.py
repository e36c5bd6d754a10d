"""`chunkmq serve`'s start, in two stages, so that a restart answers within a fraction of a second.

Importing FastAPI, pydantic's schemas, SQLAlchemy's ORM, the console and the alerts and building
the 80-odd routes took about three quarters of a start's CPU (docs/benchmarks.md, W6), and the
first requests after a restart (readiness, publish, pull, ack) need none of it. So:

1. First stage (`Staged`, the ASGI app uvicorn runs): the metadata read with sqlite3
   (app/meta/plain.py), the store recovered, the broker and token auth on them; then the server
   answers /healthz, /readyz and the hot routes (app/api/hot_routes.py: publish, pull and its
   acks), behind the same checks (`guard.every_request`) and the same rules (app/api/access.py)
   as the full app.
2. Second stage, in a thread of its own: the full app (app/main.py `create_app`) and the ORM's
   MetaStore are built, then its background work starts (`main.running`). It begins once the first
   request is answered (or arrives, if it needs the full app), at the latest SECOND_STAGE_AFTER_SECONDS
   after the first stage: begun earlier, its imports would take the GIL from the server's start and
   first answer. A request the first stage does not serve waits for it, then goes to the full app,
   as every request does from then on.

A start that must write the metadata (the first one, a migration, a missing admin token or console
user) or whose database is not a SQLite file starts the full app at once, the ORM's way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from chunkmq.api import logs, publish, pull
from chunkmq.api.auth import TokenAuth
from chunkmq.api.deps import send_json
from chunkmq.api.errors import send_error
from chunkmq.api.guard import every_request
from chunkmq.api.hot_routes import HotRoutes
from chunkmq.boot import AppState, configure_logging, readiness, tune_gc
from chunkmq.broker.broker import Broker
from chunkmq.config import Settings
from chunkmq.meta.plain import PlainMeta
from chunkmq.wire import codes

if TYPE_CHECKING:
    from chunkmq.main import App
    from chunkmq.meta import MetaStore

log = logging.getLogger("chunkmq")

_T = TypeVar("_T")

SECOND_STAGE_AFTER_SECONDS = 0.1  # the second stage's latest beginning, when no request came first


class MetaLater:
    """The broker's metadata store until the ORM's is built: a call waits for it. The broker calls
    its store in worker threads only (asyncio.to_thread), so the wait never blocks the event loop;
    in the first stage the only such call is a pull's creation of a new group."""

    def __init__(self) -> None:
        self._built = threading.Event()
        self._meta: MetaStore | None = None

    def set(self, meta: MetaStore | None) -> None:
        """The store is built (None: building it failed, and calls raise)."""
        self._meta = meta
        self._built.set()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._built.wait()
            if self._meta is None:
                raise RuntimeError("the metadata store could not be opened; see the server log")
            return getattr(self._meta, name)(*args, **kwargs)

        return call


def _in_thread(work: Callable[[], _T]) -> asyncio.Future[_T]:
    """`work` in a thread of its own rather than the default pool, whose threads may all be waiting
    on MetaLater for what `work` builds."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:
            loop.call_soon_threadsafe(future.set_exception, exc)
        else:
            loop.call_soon_threadsafe(future.set_result, result)

    threading.Thread(target=run, name="chunkmq-second-stage", daemon=True).start()
    return future


class Staged:
    """The ASGI app of a staged start (module docstring). `state` is what the hot routes read
    (`scope["app"].state`): settings, broker and auth, the same objects the full app gets."""

    def __init__(self, settings: Settings, plain: PlainMeta) -> None:
        self.settings = settings
        self.plain = plain
        self.state = AppState()
        self.state.settings = settings
        self.hot_routes = HotRoutes(every_request(settings), [*publish.routes, pull.route],
                                    cross_origin=bool(settings.cors_allowed))
        self.full: App | None = None  # the full app, once built and running
        self.built = asyncio.Event()
        self._begin = asyncio.Event()  # the second stage may begin
        self._stack = contextlib.AsyncExitStack()
        self._second: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.full is not None:
            await self.full(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and (probe := self._probe(scope)) is not None:
            scope["app"] = self
            await probe(scope, receive, send)
            self._begin.set()
        elif scope["type"] == "http" and (route := self.hot_routes.match(scope)) is not None:
            scope["app"] = self
            await self.hot_routes.serve(route, scope, receive, send)
            self._begin.set()
        else:
            self._begin.set()
            await self.built.wait()
            if self.full is None:
                await send_error(send, 503, codes.UNAVAILABLE, "the server could not start; see the server log")
                return
            await self.full(scope, receive, send)

    def _probe(self, scope: Scope) -> ASGIApp | None:
        """/healthz's or /readyz's endpoint; None for any other request."""
        if scope["method"] == "GET" and not scope.get("root_path"):
            if scope["path"] == "/healthz":
                return _healthz
            if scope["path"] == "/readyz":
                return _readyz
        return None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        try:
            await self._first_stage()
        except BaseException as exc:
            await send({"type": "lifespan.startup.failed", "message": repr(exc)})
            raise
        self._second = asyncio.create_task(self._second_stage())
        asyncio.get_running_loop().call_later(SECOND_STAGE_AFTER_SECONDS, self._begin.set)
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        assert message["type"] == "lifespan.shutdown"
        self._begin.set()
        try:
            await asyncio.shield(self._second)  # a stop during the second stage lets it finish, then closes all
            await self._stack.aclose()
        finally:
            await send({"type": "lifespan.shutdown.complete"})

    async def _first_stage(self) -> None:
        settings = self.settings
        snapshot = await asyncio.to_thread(self.plain.load)
        self.state.meta = MetaLater()
        self.state.broker = await asyncio.to_thread(Broker.open, settings, self.state.meta, snapshot)
        self.state.auth = TokenAuth(self.plain, enabled=settings.auth == "on")
        logs.install()  # tokens out of uvicorn's log lines from the first request on
        tune_gc()

    async def _second_stage(self) -> None:
        """Build the full app and the ORM's store, hand them the first stage's broker and auth, start
        the background work, and route everything to the full app from then on."""
        state, settings = self.state, self.settings
        pending: MetaLater = state.meta
        await self._begin.wait()
        began = time.monotonic()
        try:
            app, meta = await _in_thread(lambda: _build(settings))
            from chunkmq.main import running

            pending.set(meta)
            state.broker.meta = meta
            state.auth.meta = meta
            state.meta = meta
            for name in ("settings", "broker", "auth", "meta", "dir_lock"):
                setattr(app.state, name, getattr(state, name, None))
            await self._stack.enter_async_context(running(app.state, settings))
        except Exception:
            log.exception("the server could not finish its start: only readiness, publish and pull answer")
            pending.set(None)
            self._stack.push_async_callback(asyncio.to_thread, state.broker.close)
        else:
            self.full = app
            log.info("the full app is up, %.2f s after the second stage began", time.monotonic() - began)
        finally:
            self.built.set()


def _build(settings: Settings) -> tuple[App, MetaStore]:
    from chunkmq.main import create_app
    from chunkmq.meta import MetaStore

    return create_app(settings), MetaStore(settings.meta_url)


async def _healthz(scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, b'{"status":"ok"}')


async def _readyz(scope: Scope, receive: Receive, send: Send) -> None:
    status, body = readiness(scope["app"].state.broker)
    await send_json(send, orjson.dumps(body), status)


def serving_app(settings: Settings) -> ASGIApp:
    """What `chunkmq serve` runs, once it holds the data directory's lock (check_settings first):
    the staged start when the metadata can be read without writing it, else the full app (which
    writes it on its start)."""
    configure_logging(settings.log_level)
    plain = PlainMeta.open(settings.meta_url, tokens=settings.auth == "on")
    if plain is None:
        from chunkmq.main import create_app

        return create_app(settings)
    return Staged(settings, plain)

