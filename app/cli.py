"""The `chunkmq` command: `chunkmq serve`, `chunkmq token create`, `chunkmq definitions export`, ..."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # imported when a command runs: with the client alone installed, main() says what is missing
    import asyncio  # at run time by `serve`, once the cyclic GC is off (its passes slow the imports)

    import uvicorn

    from chunkmq.api.hot_routes import Answer
    from chunkmq.config import Settings


class CliError(Exception):
    """A command cannot go on: main() prints the message on one line and exits 1."""


def _settings_from(args: argparse.Namespace) -> Settings:
    from chunkmq.config import Settings

    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    return Settings(**overrides)


def _websocket_protocol() -> type[asyncio.Protocol]:
    """uvicorn's websockets-sansio protocol, except that a peer failing the heartbeat is aborted.

    uvicorn ends a peer that missed its pong with `transport.close()`, which first waits for the write
    buffer to drain. A consumer that stopped reading has a full TCP window, so that never happens:
    `connection_lost` never runs, the stream never learns the peer is gone, and the socket, its
    buffered frames and the stream's tasks stay for good (measured: 3.8 MB stuck in Send-Q, the
    connection still ESTABLISHED 8 s after the timeout). Such a peer is dead: drop what it never read.
    """
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.frames import apply_mask
    from websockets.protocol import State

    from chunkmq.api.streams import FRAME_HOOK, FRAME_WRITE
    from chunkmq.wire import frames

    class WebSocketProtocol(WebSocketsSansIOProtocol):
        # Bytes of the stream until the next frame starts (0: `data_received` starts with one), or
        # None where that is not known (before the handshake's end, after bytes that came with it).
        boundary: int | None = None

        def data_received(self, data: bytes) -> None:
            """A chunk that is one whole frame of data, with nothing before it that websockets still
            holds, goes to the stream's FRAME_HOOK as it is (unmasked) without websockets' frame
            parser and uvicorn's events: nearly every frame of a stream, one publish or ack each.
            Anything else, or a frame the hook leaves, is websockets' and uvicorn's as usual."""
            at, started = self.boundary, self.handshake_initiated
            if at == 0 and self._hooked(data):
                return
            super().data_received(data)
            if at is not None:
                self.boundary = frames.next_frame(data, at)
            elif not started and self.handshake_initiated and data.endswith(b"\r\n\r\n"):
                self.boundary = 0  # the request's end: what comes next is a frame

        def _hooked(self, data: bytes) -> bool:
            if not self.handshake_complete or self.close_sent:  # (a refused upgrade has no scope)
                return False
            hook = self.scope.get(FRAME_HOOK)
            if hook is None or self.frames or not self.queue.empty() or self.conn.state is not State.OPEN:
                return False
            start = frames.whole(data, True, self.config.ws_max_size)  # as a client's must be, masked
            if not start:
                return False
            return bool(hook(apply_mask(data[start:], data[start - frames.KEY:start]), data[0] == frames.TEXT))

        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            if not self.close_sent:  # an upgrade websockets accepted: its scope is made
                self.scope[FRAME_WRITE] = self.write_frame  # type: ignore[literal-required]

        def write_frame(self, data: bytes, text: bool) -> bool:
            """FRAME_WRITE: what `send` does with a websocket.send, done in the caller's callback,
            without its coroutine and Starlette's (a stream's push and a publish's confirm, once per
            message). False, and nothing written, wherever `send` would wait or refuse (not accepted
            yet, writing paused, closing or gone): the caller then sends it that way."""
            if (not self.handshake_complete or self.close_sent or self.disconnected or not self.writable.is_set()
                    or self.conn.state is not State.OPEN):
                return False
            # uvicorn sends whatever websockets frames at once, so nothing of its can be waiting ahead of it
            self.transport.writelines((frames.head(len(data), text), data))
            return True

        def keepalive_timeout(self) -> None:
            super().keepalive_timeout()
            if not self.disconnected and self.transport.get_write_buffer_size():
                self.transport.abort()

        def send_receive_event_to_app(self) -> None:
            """A whole frame is in: a stream that put a FRAME_HOOK in the scope (the publish stream)
            may handle it here, in this callback, instead of through the ASGI queue and a wake of its
            reader task a loop turn later (about a fifth of a one-message publish's time in the
            server). Only with nothing queued ahead of it, so frames keep their order."""
            hook = self.scope.get(FRAME_HOOK)
            if (hook is not None and len(self.frames) == 1 and not self.close_sent and self.queue.empty()
                    and hook(self.frames[0], self.curr_msg_data_type == "text")):
                self.frames = []
                return
            super().send_receive_event_to_app()

    return WebSocketProtocol


def _websocket_protocol_on_upgrade() -> Callable[..., asyncio.Protocol]:
    """What uvicorn makes a WebSocket's protocol with: `_websocket_protocol()`'s class, built (and the
    websockets library loaded) at the first upgrade, or by warm_up, rather than before a restart
    answers (app/start.py)."""
    made: list[type[asyncio.Protocol]] = []

    def protocol(**kwargs: Any) -> asyncio.Protocol:
        if not made:
            made.append(_websocket_protocol())
        return made[0](**kwargs)

    return protocol


class OneWrite:
    """The transport as one response sees it: the status line and headers wait for the body and go
    out with its first write, as one write (one send(), one TCP segment for a small answer).

    uvicorn writes them separately: two syscalls per response, about a tenth of the server's time
    on small publishes, and with Nagle off two segments, each of which the client must read."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.held = b""

    def write(self, data: bytes) -> None:
        if not self.held and data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 1"):
            self.held = data  # the response head; 100 Continue goes out at once
            return
        if self.held:  # writelines: one writev of both, without copying the body onto the head
            self.transport.writelines((self.held, data))
            self.held = b""
            return
        self.transport.write(data)

    def flush(self) -> None:
        """A response without a body write (HEAD): its head alone."""
        if self.held:
            self.transport.write(self.held)
            self.held = b""

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...: the transport's own
        return getattr(self.transport, name)


class HotCycle:
    """A hot request's cycle (app/api/hot_routes.py): what uvicorn's protocol reads and writes of a
    request's RequestResponseCycle while it reads the body, receives more requests (pipelining),
    loses the connection or shuts down. `message_event` is the cycle itself: a hot request is answered
    once its whole body is in (`on_message_complete`), so nothing waits for the event."""

    __slots__ = ("body", "disconnected", "keep_alive", "more_body", "response_complete", "route", "scope")

    def __init__(self, route: Any, scope: dict[str, Any], keep_alive: bool) -> None:
        self.route = route
        self.scope = scope
        self.keep_alive = keep_alive
        self.body = b""  # nearly always one piece (on_body), so bytes rather than a bytearray to copy out
        self.more_body = True
        self.disconnected = False
        self.response_complete = False

    @property
    def message_event(self) -> HotCycle:
        return self

    def set(self) -> None:
        pass


#: uvicorn's answer to an app that failed before answering (RequestResponseCycle.send_500_response)
_FAILED = (500, b"text/plain; charset=utf-8", b"Internal Server Error", ())


def _http_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, except that a connection must send a request's whole headers
    within `header_timeout` seconds of connecting (or of its previous response), or it is closed,
    that every response goes out in one write (OneWrite), and that the hot routes are answered
    without ASGI.

    uvicorn's `timeout_keep_alive` only runs between a response and the next request's first byte:
    a client that sends half a request line or half the headers (slowloris) held its connection, and
    a slot of `limit_concurrency`, for ever (50 such sockets were still open after 90 s).

    Past `limit_concurrency` the answer is API.md's error shape (503 `overloaded`), not uvicorn's text.

    A hot request (a publish or a pull, app/api/hot_routes.py) with a small body is answered by the
    app's HotRoutes straight from the parser's callbacks: its answer is written as one write, with the
    head uvicorn would write, after the same checks, rules and error map as through ASGI. The ASGI
    messages, the response cycle with its event, and uvicorn's checks of an app's headers were about
    a fifth of the server's CPU on a one-message publish. Anything else, or a hot request that
    uvicorn would treat specially (Expect: 100-continue, a pipelined request behind another, past
    the connection limit, a chunked or large body, an escaped path, a path prefix, an app wrapped in
    uvicorn's middlewares), takes uvicorn's own path to the app.
    """
    from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
    from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

    from chunkmq.api import wake
    from chunkmq.api.errors import overloaded
    from chunkmq.api.hot_routes import answer_of

    class HttpProtocol(HttpToolsProtocol):
        # One timer per connection for both of its clocks, each a loop time or None: the request's
        # headers must be in by `_header_deadline`; an idle keep-alive connection closes at
        # `_idle_deadline` (uvicorn's timeout_keep_alive). Setting or clearing a clock is a float per
        # request; uvicorn's call_later and cancel per clock and request cost about 5 us on every
        # single-message publish. The timer fires at the earliest clock, or once per period.
        _timer: asyncio.TimerHandle | None = None
        _timer_at = 0.0
        _header_deadline: float | None = None
        _idle_deadline: float | None = None
        _driven: wake.Run | None = None  # the last hot request run at once (a long poll may wait in it)

        def _watch(self, deadline: float) -> None:
            if self._timer is not None and self._timer_at <= deadline:
                return  # it fires first and sets itself again for this clock
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = self.loop.call_at(deadline, self._tick), deadline

        def _tick(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            now = self.loop.time()
            if self._header_deadline is not None and now >= self._header_deadline:
                self.transport.abort()  # nothing was answered yet: there is nothing to flush
            elif self._idle_deadline is not None and now >= self._idle_deadline:
                self.timeout_keep_alive_handler()
            else:
                pending = [d for d in (self._header_deadline, self._idle_deadline) if d is not None]
                if pending:
                    self._watch(min(pending))

        def _arm(self) -> None:
            deadline = self._header_deadline = self.loop.time() + header_timeout
            if self._timer is None or self._timer_at > deadline:  # (the timer due first sets itself again)
                self._watch(deadline)

        def _disarm(self) -> None:
            self._header_deadline = None

        def _unset_keepalive_if_required(self) -> None:
            self._idle_deadline = None

        def on_response_complete(self) -> None:
            """uvicorn's, with the keep-alive clock on the connection's timer."""
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._idle_deadline = None
            if self.flow.read_paused:
                self.flow.resume_reading()
            if self.pipeline:  # the pipelined request that waited for this one
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                deadline = self._idle_deadline = self.loop.time() + self.timeout_keep_alive
                if self._timer is None or self._timer_at > deadline:
                    self._watch(deadline)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            """uvicorn's, but the scope is made once the request's path is known: a hot request's own
            (_hot_cycle), or uvicorn's (_asgi_scope)."""
            self.url = b""
            self.expect_100_continue = False
            self.headers = []
            self._arm()

        def _asgi_scope(self, http_version: str = "1.1") -> dict[str, Any]:
            """The scope uvicorn's on_message_begin makes (a hot request's has its path too)."""
            self.scope = scope = {  # type: ignore[typeddict-item]
                "type": "http",
                "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
                "http_version": http_version,
                "server": self.server,
                "client": self.client,
                "scheme": self.scheme,  # type: ignore[typeddict-item]
                "root_path": self.root_path,
                "headers": self.headers,
                "state": self.app_state.copy(),
            }
            return scope  # type: ignore[return-value]

        def on_headers_complete(self) -> None:
            self._disarm()
            if self._hot_cycle():
                return
            self._asgi_scope()
            super().on_headers_complete()
            cycle = self.cycle  # this request's, just made (its task has not run yet)
            if cycle is not None and not isinstance(cycle.transport, OneWrite):
                out = OneWrite(self.transport)
                cycle.transport = out  # type: ignore[assignment]
                done = cycle.on_response

                def finished() -> None:
                    out.flush()
                    done()

                cycle.on_response = finished

        def _hot_cycle(self) -> bool:
            """Whether this request is a hot one that the app's HotRoutes answer (on_message_complete);
            its scope is filled as uvicorn fills it."""
            hot = getattr(self.app, "hot_routes", None)  # the app itself, not wrapped by uvicorn
            parser = self.parser
            if (hot is None or parser.get_method() != b"POST" or self.expect_100_continue or self.root_path
                    or parser.should_upgrade() or (self.cycle is not None and not self.cycle.response_complete)):
                return False
            limit = self.limit_concurrency
            if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
                return False
            connection = False  # a Connection header: only then can a kept-alive request be HTTP/1.0
            for name, value in self.headers:
                if name == b"transfer-encoding" or (
                        name == b"content-length" and not (value.isdigit() and int(value) <= HIGH_WATER_LIMIT)):
                    return False
                connection = connection or name == b"connection"
            # An origin-form target ("/path?query"), as httptools.parse_url splits it; a fragment, an
            # absolute form or an escaped path matches no hot route and takes uvicorn's path.
            raw_path, _, query = self.url.partition(b"?")
            found = None if b"#" in query else hot.route_raw(raw_path)
            if found is None:
                return False
            route, params, path = found
            # kept alive without a Connection header is HTTP/1.1 (1.0 needs `Connection: keep-alive`);
            # get_http_version formats a string, about a microsecond
            keep_alive = parser.should_keep_alive()
            http_version = "1.1" if keep_alive and not connection else parser.get_http_version()
            scope = self._asgi_scope(http_version)
            scope.update({"method": "POST", "path": path, "raw_path": raw_path, "query_string": query,
                          "path_params": params, "app": self.app})
            self.cycle = HotCycle(route, scope, keep_alive and http_version != "1.0")  # type: ignore[assignment]
            return True

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if type(cycle) is not HotCycle:
                super().on_body(body)
            elif not cycle.response_complete:
                cycle.body = cycle.body + body if cycle.body else body

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if type(cycle) is not HotCycle:
                super().on_message_complete()
            elif not cycle.response_complete:
                cycle.more_body = False
                if not cycle.route.eager:
                    self._spawn(self._answer(cycle, None))
                    return
                # run at once: written now if it answered at once (a publish in fsync=interval); else a
                # task only if it has to wait for other than a Wake (app/api/wake.py, app/api/eager.py)
                answer = self.app.hot_routes.respond(cycle.route, cycle.scope, cycle.body)
                if type(answer) is tuple and not self.flow.write_paused:
                    self._write(cycle, answer)
                    return
                self._driven = wake.run(self._answer(cycle, answer), self._spawn)

        def shutdown(self) -> None:
            """uvicorn's, with a long poll parked outside any task (app/api/wake.py) moved into one:
            the shutdown waits for it, and cancels it at its timeout, as for any request."""
            if self._driven is not None:
                self._driven.to_task()
            super().shutdown()

        def _spawn(self, answering: Coroutine[Any, Any, None]) -> None:
            task = self.loop.create_task(answering)
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

        async def _answer(self, cycle: HotCycle, answer: Answer | Awaitable[Answer] | None) -> None:
            """Write the answer (HotRoutes.respond's, asked here when None) once it is in and the
            transport takes writes."""
            try:
                if answer is None:
                    answer = self.app.hot_routes.respond(cycle.route, cycle.scope, cycle.body)
                answer = await answer_of(answer)
            except BaseException as exc:  # cancelled at a forced shutdown (respond maps every Exception)
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
                answer, cycle.keep_alive = _FAILED, False
            if self.flow.write_paused and not cycle.disconnected:
                await self.flow.drain()
            self._write(cycle, answer)

        def _write(self, cycle: HotCycle, answer: Answer) -> None:
            if cycle.disconnected:
                return
            status, content_type, body, headers = answer
            if self.access_log:
                self.access_logger.info('%s - "%s %s HTTP/%s" %d', get_client_addr(cycle.scope), "POST",
                                        get_path_with_query_string(cycle.scope), cycle.scope["http_version"], status)
            if headers or not cycle.keep_alive:
                out = [self._head(status, content_type), b"%d\r\n" % len(body)]
                for name, value in headers:
                    out += (name, b": ", value, b"\r\n")
                if not cycle.keep_alive:
                    out.append(b"connection: close\r\n")
                out += (b"\r\n", body)
                self.transport.write(b"".join(out))
            else:  # the usual answer: its head, its length, its body
                self.transport.write(b"%b%d\r\n\r\n%b" % (self._head(status, content_type), len(body), body))
            cycle.response_complete = True
            if not cycle.keep_alive:
                self.transport.close()
            self.on_response_complete()

        # An answer's head up to its content-length value, per (status, content type): the server's
        # default headers (its date) change once a second, not per answer. Kept for the list they
        # were made with (uvicorn sets a new one each second).
        _heads: dict[tuple[int, bytes], bytes] = {}
        _heads_for: list[tuple[bytes, bytes]] | None = None

        def _head(self, status: int, content_type: bytes) -> bytes:
            cls = type(self)
            defaults = self.server_state.default_headers
            if cls._heads_for is not defaults:
                cls._heads, cls._heads_for = {}, defaults
            head = cls._heads.get((status, content_type))
            if head is None:
                out = [STATUS_LINE[status]]
                for name, value in (*defaults, (b"content-type", content_type)):
                    out += (name, b": ", value, b"\r\n")
                out.append(b"content-length: ")
                head = cls._heads[(status, content_type)] = b"".join(out)
            return head

        def connection_lost(self, exc: Exception | None) -> None:
            self._header_deadline = self._idle_deadline = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            # Past limit_concurrency uvicorn answers with its plain-text 503: answer API.md's JSON.
            super()._start_asgi_task(cycle, overloaded if app is service_unavailable else app)

    return HttpProtocol


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The server stack `chunkmq serve` runs the app on: uvicorn's arguments (the W8 benchmark's bare
    ASGI floor runs on exactly these too, bench/floor.py)."""
    return dict(
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=_http_protocol(settings.request_header_timeout_seconds),
        # Past this many open connections (WebSockets included) a new request is answered 503.
        limit_concurrency=settings.max_connections,
        ws=_websocket_protocol_on_upgrade(),
        # A publish-stream frame may carry a whole batch; uvicorn's default would cap it at 16 MiB.
        ws_max_size=settings.max_batch_bytes + 1024 * 1024,
        # No permessage-deflate: its zlib state costs about 35 KB per connection, most of an idle
        # consumer's memory (docs/scaling.md), and CPU on every frame; clients offering it get plain frames.
        ws_per_message_deflate=False,
        ws_ping_interval=settings.ws_ping_interval,
        ws_ping_timeout=settings.ws_ping_timeout,
        log_level=settings.log_level,
        # uvicorn formats every request's access-log arguments before the logger drops the line:
        # 4% of the server's time on binary publishes with the log level at warning.
        access_log=settings.log_level.lower() in ("trace", "debug", "info"),
        timeout_graceful_shutdown=5,
        # X-Forwarded-* only from the proxies CHUNKMQ_FORWARDED_ALLOW_IPS names (uvicorn's own default
        # trusts 127.0.0.1, and anyone on the machine could then pick the address the login limit counts)
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
    )


def uvicorn_server() -> tuple[type[uvicorn.Config], type[uvicorn.Server]]:
    """uvicorn's Config and Server (its documented way to run a server from code) without running
    uvicorn/__init__.py, which imports uvicorn.main: its command line (click) and its reloaders
    (multiprocessing, watchfiles), which `serve` never uses, a twentieth of a restart's first stage.
    The package stands in sys.modules with its submodules and Config (uvicorn.lifespan imports it from
    the package) until `complete_uvicorn` runs its __init__, once the server answers."""
    if "uvicorn" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("uvicorn")
        assert spec is not None and spec.loader is not None
        sys.modules["uvicorn"] = importlib.util.module_from_spec(spec)
    from uvicorn.config import Config
    from uvicorn.server import Server

    sys.modules["uvicorn"].Config = Config  # type: ignore[attr-defined]
    return Config, Server


def complete_uvicorn() -> None:
    """Run uvicorn/__init__.py if `uvicorn_server` left it out: `import uvicorn` gets the whole package."""
    package = sys.modules.get("uvicorn")
    if package is not None and not hasattr(package, "run"):
        assert package.__spec__ is not None and package.__spec__.loader is not None
        package.__spec__.loader.exec_module(package)


def _serve(args: argparse.Namespace) -> int:
    import gc

    # No cyclic collections while the start imports and builds (it makes next to no garbage, and the
    # passes over its growing heap were a tenth of the imports' time): tune_gc turns them back on.
    gc.disable()
    config_class, server_class = uvicorn_server()
    from uvicorn.config import STARTUP_FAILURE

    from chunkmq.start import ConfigError, check_settings, serving_app
    from chunkmq.storage.lock import DirectoryLock, DirectoryLocked

    settings = _settings_from(args)
    os.umask(0o077)  # whatever the server or a library creates (SQLite's journals too) is owner-only
    try:
        check_settings(settings)
    except ConfigError as exc:
        print(f"chunkmq: {exc}", file=sys.stderr)
        return 2
    try:  # before anything in the directory is read, recovered or created
        lock = DirectoryLock.acquire(settings.data_dir)
    except DirectoryLocked as exc:
        print(f"chunkmq: {exc}", file=sys.stderr)
        return 1
    app = serving_app(settings)  # in two stages (app/start.py)
    app.state.dir_lock = lock  # type: ignore[attr-defined]
    from chunkmq.broker import blob
    from chunkmq.storage import record
    from chunkmq.wire import batch

    for what, module in (("record codec", record), ("wire batch codec", batch), ("blob parser", blob)):
        logging.getLogger("chunkmq").info("%s: %s", what, module.IMPLEMENTATION)
    server = server_class(config_class(app, **uvicorn_options(settings)))  # as uvicorn.run(app, ...)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else STARTUP_FAILURE


# --- chunkmq token ... (metadata / auth) --------------------------------------------------------

if TYPE_CHECKING:  # imported lazily at run time: `chunkmq serve` need not load the metadata layer
    import httpx

    from chunkmq.meta import MetaStore
    from chunkmq.meta.alerts import AlertRepository


def _token_store(args: argparse.Namespace) -> MetaStore:
    """A store on the metadata database of the broker whose data directory `serve` would use (the
    same flags and CHUNKMQ_* variables), migrations applied. A directory or database no broker has
    started on is refused: a token or user written there would be one no server knows."""
    from sqlalchemy.engine import make_url

    from chunkmq.meta import MetaStore, upgrade
    from chunkmq.meta.migrate import current_revision

    settings = _settings_from(args)
    url = make_url(settings.meta_url)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
        if settings.database_url:
            raise CliError(f"no broker database at {url.database}: check --database-url or CHUNKMQ_DATABASE_URL")
        raise CliError(f"no broker data in {settings.data_dir.resolve()}: give the broker's --data-dir "
                       "(or set CHUNKMQ_DATA_DIR), or start `chunkmq serve` there first")
    if current_revision(settings.meta_url) is None:
        raise CliError(f"{url.render_as_string(hide_password=True)} holds no broker metadata: "
                       "start `chunkmq serve` on it first")
    upgrade(settings.meta_url)
    return MetaStore(settings.meta_url)


def _answer(exc: Exception) -> int:
    """An error as the API answers it (app/api/errors.py, the one error map), on stderr: its message
    and code. The exit status is 1 for a missing entity, 2 for anything else."""
    from chunkmq.api.errors import api_error

    error = api_error(exc)
    print(f"chunkmq: {error.message} ({error.code})", file=sys.stderr)
    return 1 if error.status == 404 else 2


def _token_create(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            row, plain = meta.create_token(
                args.name, is_admin=args.admin, configure=args.configure, write=args.write, read=args.read
            )
        except MetaError as e:
            return _answer(e)
    # The token alone on stdout (scripts capture it); the rest on stderr.
    print(plain)
    print(f"created token {row.id} {row.name!r} ({row.prefix}...); it is shown only now", file=sys.stderr)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with _token_store(args) as meta:
        tokens = meta.list_tokens()
    _print_table(("id", "name", "prefix", "admin", "configure", "write", "read", "created", "last used"), [
        (str(t.id), t.name, t.prefix + "...", "yes" if t.is_admin else "", t.configure, t.write, t.read,
         f"{t.created_at:%Y-%m-%d %H:%M}", f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "")
        for t in tokens])
    return 0


def _token_delete(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            meta.delete_token(args.id)
        except MetaError as e:
            return _answer(e)
    print(f"deleted token {args.id}", file=sys.stderr)
    return 0


DATA_DIR_HELP = "the broker's data directory (default $CHUNKMQ_DATA_DIR, else ./data)"


def _where_parser() -> argparse.ArgumentParser:
    """--data-dir and --database-url: where the metadata database of a command that works on it is."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--data-dir", dest="data_dir", help=DATA_DIR_HELP)
    where.add_argument("--database-url", dest="database_url",
                       help="SQLAlchemy URL of the metadata (default $CHUNKMQ_DATABASE_URL, else <data-dir>/meta.db)")
    return where


def _add_token_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    where = _where_parser()

    token = sub.add_parser("token", help="manage API tokens")
    actions = token.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", parents=[where], help="create a token and print it (once)")
    create.add_argument("--name", required=True, help="what the token is for (shown in lists and the console)")
    create.add_argument("--admin", action="store_true", help="allowed everything")
    for action in ("configure", "write", "read"):
        create.add_argument(f"--{action}", default="", metavar="RE", help=f"regex of names to {action} (default: none)")
    create.set_defaults(func=_token_create)
    actions.add_parser("list", parents=[where], help="list tokens").set_defaults(func=_token_list)
    delete = actions.add_parser("delete", parents=[where], help="delete a token")
    delete.add_argument("id", type=int)
    delete.set_defaults(func=_token_delete)


# --- chunkmq definitions ... (over HTTP: the running server owns the data) ------------------------


def _api(args: argparse.Namespace) -> httpx.Client:
    import httpx

    from chunkmq.config import ClientSettings, Settings

    client = ClientSettings()
    url = args.url or client.url
    token = args.token or client.token
    if not token:  # on the broker's own machine: the first admin token it wrote
        path = Path(args.data_dir or Settings().data_dir) / "admin-token"
        token = path.read_text().strip() if path.exists() else ""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=60)


def _call(args: argparse.Namespace, method: str, path: str, body: bytes | None = None) -> Any:
    """One API call; an error answer or an unreachable server is printed and ends the command."""
    import httpx
    import orjson

    try:
        with _api(args) as api:
            response = api.request(method, path, content=body, headers={"content-type": "application/json"})
    except httpx.HTTPError as e:
        raise SystemExit(f"chunkmq: cannot reach the server: {e}") from None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            message = f"{error['message']} ({error['code']})"
        except (ValueError, KeyError, TypeError):
            message = response.text
        raise SystemExit(f"chunkmq: {response.status_code}: {message}")
    return orjson.loads(response.content) if response.content else None


def _definitions_export(args: argparse.Namespace) -> int:
    import orjson

    data = orjson.dumps(_call(args, "GET", "/api/v1/definitions"), option=orjson.OPT_INDENT_2) + b"\n"
    if args.file:
        Path(args.file).write_bytes(data)
        print(f"definitions written to {args.file}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
    return 0


def _definitions_import(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console
    from rich.table import Table

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {args.file}: {e.strerror}") from None
    result = _call(args, "POST", "/api/v1/definitions", raw)
    table = Table("section", "created", "unchanged")
    for section, created in result["created"].items():
        table.add_row(section, str(created), str(result["unchanged"].get(section, 0)))
    Console(stderr=True).print(table)
    if result["tokens"]:  # secrets of the tokens created: on stdout, like `chunkmq token create`
        print(orjson.dumps(result["tokens"], option=orjson.OPT_INDENT_2).decode())
    return 0


def _add_definitions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--url", help="the server (default $CHUNKMQ_URL or http://127.0.0.1:8000)")
    server.add_argument("--token", help="an admin token (default $CHUNKMQ_TOKEN, else <data-dir>/admin-token)")
    server.add_argument("--data-dir", dest="data_dir", help="where to find <data-dir>/admin-token (default "
                        "$CHUNKMQ_DATA_DIR, else ./data)")

    definitions = sub.add_parser("definitions",
                                 help="export or import exchanges, queues, bindings, groups, permissions")
    actions = definitions.add_subparsers(dest="action", required=True)
    export = actions.add_parser("export", parents=[server], help="print the definitions as JSON")
    export.add_argument("--file", help="write them to this file instead")
    export.set_defaults(func=_definitions_export)
    imp = actions.add_parser("import", parents=[server], help="import definitions (checked whole first)")
    imp.add_argument("file", help="a JSON file, or - for standard input")
    imp.set_defaults(func=_definitions_import)
# --- chunkmq user ... (console users) -----------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    """From --password-stdin (scripts) or asked twice on the terminal; never from a flag (ps shows it)."""
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass("password: ")
    if first != getpass.getpass("again: "):
        raise ValueError("the passwords differ")
    return first


def _user_create(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    try:
        password = _read_password(args)
        with _token_store(args) as meta:
            meta.create_user(args.name, password, is_admin=not args.read_only)
    except MetaError as e:
        return _answer(e)
    except ValueError as e:  # the two passwords differ
        print(f"chunkmq: {e}", file=sys.stderr)
        return 2
    print(f"created console user {args.name!r}", file=sys.stderr)
    return 0


def _user_passwd(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    try:
        password = _read_password(args)
        with _token_store(args) as meta:
            meta.set_password(args.name, password)
    except MetaError as e:
        return _answer(e)
    except ValueError as e:  # the two passwords differ
        print(f"chunkmq: {e}", file=sys.stderr)
        return 2
    print(f"changed the password of {args.name!r} (sessions end at the server's next restart)", file=sys.stderr)
    return 0


def _user_list(args: argparse.Namespace) -> int:
    with _token_store(args) as meta:
        users = meta.list_users()
    _print_table(("id", "name", "role", "created"),
                 [(str(u.id), u.name, "admin" if u.is_admin else "read-only", f"{u.created_at:%Y-%m-%d %H:%M}")
                  for u in users])
    return 0


def _print_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table on stdout; piped, as wide as it needs (not squeezed into 80 columns)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(*columns)
    for row in rows:
        table.add_row(*map(Text, row))  # Text, not markup: a name may hold [brackets]
    console = Console()
    if not console.is_terminal:
        console = Console(width=250)
    console.print(table)


def _user_delete(args: argparse.Namespace) -> int:
    from chunkmq.meta import MetaError

    with _token_store(args) as meta:
        try:
            meta.delete_user(args.name)
        except MetaError as e:
            return _answer(e)
    print(f"deleted console user {args.name!r}", file=sys.stderr)
    return 0


def _user_unlock(args: argparse.Namespace) -> int:
    from chunkmq.web.session import request_unlock

    settings = _settings_from(args)
    with _token_store(args) as meta:
        if args.name not in {u.name for u in meta.list_users()}:
            print(f"chunkmq: no user {args.name!r}", file=sys.stderr)
            return 1
    request_unlock(settings.data_dir, args.name)
    print(f"unlocked console user {args.name!r}: the server lets them log in at their next try", file=sys.stderr)
    return 0


def _add_user_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    where = _where_parser()
    secret = argparse.ArgumentParser(add_help=False)
    secret.add_argument("--password-stdin", action="store_true", help="read the password from standard input")

    user = sub.add_parser("user", help="manage console users")
    actions = user.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", parents=[where, secret], help="create a console user")
    create.add_argument("name")
    create.add_argument("--read-only", action="store_true", help="may look but not act")
    create.set_defaults(func=_user_create)
    passwd = actions.add_parser("passwd", parents=[where, secret], help="set a user's password")
    passwd.add_argument("name")
    passwd.set_defaults(func=_user_passwd)
    actions.add_parser("list", parents=[where], help="list console users").set_defaults(func=_user_list)
    delete = actions.add_parser("delete", parents=[where], help="delete a console user")
    delete.add_argument("name")
    delete.set_defaults(func=_user_delete)
    unlock = actions.add_parser("unlock", parents=[where], help="end a user's lock after failed logins")
    unlock.add_argument("name")
    unlock.set_defaults(func=_user_unlock)


# --- chunkmq alerts ... (alert rules) ------------------------------------------------------------

_RULE_COLUMNS = ("id", "kind", "queue", "group", "threshold", "for_seconds", "renotify_seconds", "window_seconds",
                 "recipients", "enabled")


def _rule_body(args: argparse.Namespace) -> dict[str, object]:
    return {"kind": args.kind, "queue": args.queue, "group": args.group, "threshold": args.threshold,
            "for_seconds": args.for_seconds, "renotify_seconds": args.renotify_seconds,
            "window_seconds": args.window_seconds, "recipients": args.to or [], "enabled": not args.disabled}


def _alerts_call(args: argparse.Namespace, method: str, path: str, body: object = None) -> Any:
    """Over HTTP (with --url): the running server validates and applies the change."""
    import orjson

    return _call(args, method, f"/api/v1/alerts{path}", None if body is None else orjson.dumps(body))


@contextlib.contextmanager
def _alert_repository(args: argparse.Namespace) -> Iterator[AlertRepository]:
    """Straight on the metadata database (SQLite is shared safely with a running server, which
    reads the rules again at every evaluation)."""
    from chunkmq.meta.alerts import AlertRepository

    with _token_store(args) as meta:
        yield AlertRepository(meta)


def _alerts_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if args.url:
        rules = list(_alerts_call(args, "GET", "/rules"))  # type: ignore[arg-type]
    else:
        from dataclasses import asdict

        with _alert_repository(args) as repo:
            rules = [asdict(r) for r in repo.list_rules()]
    table = Table(*_RULE_COLUMNS)
    for r in rules:
        cells = [", ".join(r[c]) if c == "recipients" else ("yes" if r[c] else "no") if c == "enabled" else str(r[c])
                 for c in _RULE_COLUMNS]
        table.add_row(*map(Text, cells))
    console = Console()
    if not console.is_terminal:
        console = Console(width=250)
    console.print(table)
    return 0


def _alerts_add(args: argparse.Namespace) -> int:
    body = _rule_body(args)
    if args.url:
        path = f"/rules/{args.id}" if args.id else "/rules"
        rule = _alerts_call(args, "PUT" if args.id else "POST", path, body)
        rule_id = rule["id"]  # type: ignore[index]
    else:
        from chunkmq.meta import MetaError

        try:
            with _alert_repository(args) as repo:
                row, _ = repo.put_rule(args.id, **body)
        except MetaError as e:
            return _answer(e)
        rule_id = row.id
    print(rule_id)
    print(f"saved alert rule {rule_id} ({args.kind} >= {args.threshold:g})", file=sys.stderr)
    return 0


def _alerts_delete(args: argparse.Namespace) -> int:
    if args.url:
        _alerts_call(args, "DELETE", f"/rules/{args.id}")
    else:
        from chunkmq.meta import MetaError

        try:
            with _alert_repository(args) as repo:
                repo.delete_rule(args.id)
        except MetaError as e:
            return _answer(e)
    print(f"deleted alert rule {args.id}", file=sys.stderr)
    return 0


def _add_alerts_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.meta.rows import ALERT_KINDS

    where = _where_parser()
    where.add_argument("--url", help="a running server (http://host:port): go through its API instead")
    where.add_argument("--token", help="an admin token for --url (default $CHUNKMQ_TOKEN, else <data-dir>/admin-token)")

    alerts = sub.add_parser("alerts", help="manage alert rules")
    actions = alerts.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[where], help="list alert rules").set_defaults(func=_alerts_list)
    add = actions.add_parser("add", parents=[where], help="add an alert rule (or replace rule --id)")
    add.add_argument("--id", type=int, help="replace this rule (or create it with this id)")
    add.add_argument("--kind", required=True, choices=ALERT_KINDS)
    add.add_argument("--threshold", required=True, type=float)
    add.add_argument("--queue", default="*", help="glob over queue names (default *)")
    add.add_argument("--group", default="*", help="glob over group names (default *)")
    add.add_argument("--for", dest="for_seconds", type=float, default=0.0, metavar="SECONDS",
                     help="how long the condition must hold before it fires")
    add.add_argument("--renotify", dest="renotify_seconds", type=float, default=3600.0, metavar="SECONDS",
                     help="reminder interval while firing; 0 = once (default 3600)")
    add.add_argument("--window", dest="window_seconds", type=float, default=300.0, metavar="SECONDS",
                     help="dead_letters: the window counted (default 300)")
    add.add_argument("--to", action="append", metavar="ADDRESS", help="recipient (repeatable; default CHUNKMQ_SMTP_TO)")
    add.add_argument("--disabled", action="store_true")
    add.set_defaults(func=_alerts_add)
    delete = actions.add_parser("delete", parents=[where], help="delete an alert rule")
    delete.add_argument("id", type=int)
    delete.set_defaults(func=_alerts_delete)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line too (argparse prints the whole usage first), pointing to --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.config import FsyncSetting

    serve = sub.add_parser("serve", help="run the broker", description="Run the broker. Every other setting is "
                           "a CHUNKMQ_* environment variable (README.md, Configuration).")
    serve.add_argument("--host", help="the address to listen on (default $CHUNKMQ_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="the port to listen on (default $CHUNKMQ_PORT, else 8000)")
    serve.add_argument("--data-dir", dest="data_dir", help=f"{DATA_DIR_HELP}; created on the first start")
    serve.add_argument("--fsync", choices=[m.value for m in FsyncSetting],
                       help="always: answer a publish after its fsync; interval: fsync every "
                            "$CHUNKMQ_FSYNC_INTERVAL_MS; never: leave it to the OS "
                            "(default $CHUNKMQ_FSYNC, else interval)")
    serve.set_defaults(func=_serve)


def _add_spark_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from chunkmq.spark.jobs import add_parser  # argparse only: no PySpark import

    add_parser(sub)


_COMMANDS = {"serve": _add_serve_parser, "token": _add_token_parser, "definitions": _add_definitions_parser,
             "alerts": _add_alerts_parser, "spark": _add_spark_parser, "user": _add_user_parser}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: argparse looks for translations on disk for
    every parser it makes (about 30, a tenth of a restart's first stage), and a command line parses
    the same with its own command's parser."""
    parser = _Parser(prog="chunkmq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add in _COMMANDS.items():
        if command in (None, name):
            add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every error is one line on stderr and a non-zero exit status."""
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv[0] if argv and argv[0] in _COMMANDS else None).parse_args(argv)
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] == "chunkmq":
            raise
        # `pip install chunkmq` is the client alone: say which extra brings what is missing
        extra = "spark" if (e.name or "").partition(".")[0] in ("pyspark", "pandas") else "server"
        print(f"chunkmq: this command needs the {extra} extra (no module named {e.name!r}): "
              f"pip install 'chunkmq[{extra}]'", file=sys.stderr)
        return 2
    except CliError as e:
        print(f"chunkmq: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug or an environment problem: still one line, with what it was
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"chunkmq: {type(e).__name__}: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
