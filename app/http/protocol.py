"""`chunkmq serve`'s HTTP/1.1 protocol: uvicorn's httptools protocol, with the hot routes answered
straight from the parser's callbacks (app/api/hot_routes.py) and every response in one write.

A connection goes through these states, request after request:

- headers: the parser is given bytes until `on_headers_complete`; the whole head must come within
  CHUNKMQ_REQUEST_HEADER_TIMEOUT_SECONDS of connecting or of the previous response, or the
  connection is closed (the one timer also runs uvicorn's keep-alive clock between requests);
- body: a hot request (a publish or a pull with a small, non-chunked body, no Expect, nothing ahead
  of it on the connection) collects its body in a HotCycle; any other request is uvicorn's own
  RequestResponseCycle and goes to the app through ASGI;
- hot answer: at `on_message_complete` the hot route runs (eagerly when it can) and its answer is
  written in one write, with the head uvicorn would write (an ASGI answer goes out in one write too,
  through OneWrite);
- pipelined request waiting: bytes that arrive while an answer is pending are parsed behind it and
  wait, with reading paused, until the answer before them is out (uvicorn's flow control);
- half-closed: a client's end of input (EOF) with a request read and not yet answered keeps the
  connection open until that answer is out, then closes it; otherwise it closes at once;
- upgrade: a request asking for a WebSocket gets no cycle: `self.cycle` stays the previous
  request's, and the upgrade request's own parser callbacks (its end of message) must not reach it
  (a HotCycle takes none after its end; uvicorn's cycle checks `should_upgrade`). Once the request
  before it is answered (at once, or later with reading paused until then), the connection goes to
  the WebSocket protocol (app/http/websocket.py) with the upgrade request, as uvicorn hands it over;
  bytes that came in the same read behind the upgrade request are not passed on (a client sends
  its first frame after the 101).
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at run time by `serve`, once the cyclic GC is off (app/http/server.py)
    import asyncio

    from chunkmq.api.hot_routes import Answer
    from chunkmq.http.access_log import HotAccessLog


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

    __slots__ = ("body", "disconnected", "keep_alive", "more_body", "response_complete", "route", "scope", "started")

    def __init__(self, route: Any, scope: dict[str, Any], keep_alive: bool, started: float) -> None:
        self.route = route
        self.scope = scope
        self.keep_alive = keep_alive
        self.started = started  # the loop's time at its headers (the access log's slow answers)
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


def http_protocol(header_timeout: float, hot_log: HotAccessLog | None = None) -> type[asyncio.Protocol]:
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
    uvicorn's middlewares), takes uvicorn's own path to the app. `hot_log` says which hot answers
    get an access-log line (app/http/access_log.py; default: every one, as uvicorn's).
    """
    from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
    from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

    from chunkmq.api import wake
    from chunkmq.api.errors import overloaded
    from chunkmq.api.hot_routes import answer_of
    from chunkmq.http.access_log import HotAccessLog

    logged = hot_log or HotAccessLog()

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
        _upgrade_waiting = False  # an upgrade request parsed while the request before it is unanswered

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

        def handle_websocket_upgrade(self) -> None:
            """uvicorn's, once every request before the upgrade is answered: uvicorn hands the
            connection over at once, and the answer still pending would then be written into the
            WebSocket's stream, after or before its 101."""
            if self.cycle is not None and not self.cycle.response_complete:
                self._upgrade_waiting = True
                self.flow.pause_reading()  # nothing more is parsed: the scope stays the upgrade's
                return
            super().handle_websocket_upgrade()

        def on_response_complete(self) -> None:
            """uvicorn's, with the keep-alive clock on the connection's timer."""
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._idle_deadline = None
            if self._upgrade_waiting and self.cycle.response_complete:  # the last one before it
                self._upgrade_waiting = False
                super().handle_websocket_upgrade()
                self.flow.resume_reading()  # the WebSocket's reading, on the same transport
                return
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
            if self.parser.should_upgrade() and self._should_upgrade():
                return  # no cycle of its own: self.cycle is still the previous request's (data_received)
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
                if name == b"origin" and hot.cross_origin:
                    # CORS is configured: the stack's CORS middleware (app/api/cors.py) answers a
                    # request from a page, with its headers, rather than a second copy of it here
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
            self.cycle = HotCycle(route, scope, keep_alive and http_version != "1.0",  # type: ignore[assignment]
                                  self.loop.time())
            return True

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if type(cycle) is not HotCycle:
                super().on_body(body)
            elif cycle.more_body:  # (else an upgrade's, parsed behind it: not this request's)
                cycle.body = cycle.body + body if cycle.body else body

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if type(cycle) is not HotCycle:
                super().on_message_complete()
            elif cycle.more_body:  # (else an upgrade's end, parsed behind it, as on_body)
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
            # An event stream (app/api/events.py STREAM_END) never ends by itself: it is told to end
            # now, so the shutdown neither waits for it nor cancels it at the timeout
            end = getattr(self.cycle, "scope", {}).get("chunkmq.stream_end")
            if end is not None:
                end()
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
            if logged.answered(cycle.route.path, status, self.loop.time() - cycle.started) and self.access_log:
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

        def eof_received(self) -> bool | None:
            """A client that shut down its sending side after its request (a half-close) still gets
            the answer: the connection stays open for writing until the last request read is answered,
            with `connection: close`. uvicorn closes at once (asyncio's default for None), so an answer
            not written within the callback that read the request (a pull, anything through ASGI)
            was dropped. A request still missing part of its body is never completed: closed as before."""
            cycle = self.cycle
            if cycle is None or cycle.response_complete or cycle.more_body:
                return None
            cycle.keep_alive = False
            return True

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

