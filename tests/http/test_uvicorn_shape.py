"""The shape of uvicorn's private classes that `chunkmq serve` subclasses (app/http/).

pyproject.toml holds uvicorn to the release these checks passed with; when `make lock` or a
range change brings another one, this file says what moved before a server misbehaves.
tests/http/test_connections.py checks the behaviour itself on real servers.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import uvicorn
from packaging.version import Version
from uvicorn.protocols.http import flow_control, httptools_impl
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from chunkmq.http.protocol import http_protocol
from chunkmq.http.websocket import websocket_protocol


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _assigns(cls: type, method: str, *attributes: str) -> bool:
    source = inspect.getsource(getattr(cls, method))
    return all(f"self.{attribute} =" in source or f"self.{attribute}:" in source for attribute in attributes)


def test_uvicorn_is_the_tested_release() -> None:
    assert Version(uvicorn.__version__) == Version("0.54.0")


def test_the_http_protocol_methods_the_subclass_overrides_keep_their_signatures() -> None:
    base = httptools_impl.HttpToolsProtocol
    assert _parameters(base.connection_made) == ["self", "transport"]
    assert _parameters(base.on_message_begin) == ["self"]
    assert _parameters(base.on_headers_complete) == ["self"]
    assert _parameters(base.connection_lost) == ["self", "exc"]
    assert _parameters(base._start_asgi_task) == ["self", "cycle", "app"]
    # what the subclass reads: the loop, the transport, and the request's cycle
    assert _assigns(base, "__init__", "loop", "cycle")
    assert _assigns(base, "connection_made", "transport")
    # on_headers_complete makes the cycle and starts it (the subclass swaps the cycle's transport between)
    source = inspect.getsource(base.on_headers_complete)
    assert source.index("self.cycle = RequestResponseCycle(") < source.index("self._start_asgi_task(self.cycle, app)")
    assert "app = service_unavailable" in source


def test_the_response_cycle_writes_its_head_then_its_body_and_calls_on_response() -> None:
    cycle = httptools_impl.RequestResponseCycle
    assert {"transport", "on_response"} <= set(_parameters(cycle.__init__))
    assert _assigns(cycle, "__init__", "transport", "on_response")
    assert httptools_impl._get_status_line(200).startswith(b"HTTP/1.1 200")  # what OneWrite holds back
    send = inspect.getsource(cycle.send)
    assert "self.transport.write(" in send and "self.on_response()" in send
    assert inspect.iscoroutinefunction(flow_control.service_unavailable)
    assert _parameters(flow_control.service_unavailable) == ["scope", "receive", "send"]


def test_what_the_protocol_s_hot_path_reads_and_the_cycle_state_it_stands_in_for() -> None:
    """app/http/protocol.py answers hot requests itself (HotCycle): it fills the scope as on_headers_complete
    does, and uvicorn's methods that touch a request's cycle use only what HotCycle has."""
    base = httptools_impl.HttpToolsProtocol
    assert _parameters(base.on_message_complete) == ["self"]
    assert _assigns(base, "__init__", "app", "limit_concurrency", "root_path", "access_log", "access_logger",
                    "server_state", "connections", "tasks", "logger")
    assert _assigns(base, "on_message_begin", "url", "expect_100_continue", "headers", "scope")
    assert _assigns(base, "connection_made", "flow")
    headers = inspect.getsource(base.on_headers_complete)
    for key in ("method", "http_version", "path", "raw_path", "query_string"):
        assert f'self.scope["{key}"] =' in headers
    assert "httptools.parse_url(self.url)" in headers and 'if "%" in path' in headers
    assert "keep_alive=http_version != \"1.0\" and self.parser.should_keep_alive()" in headers
    assert "len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency" in headers
    cycle_uses = "".join(inspect.getsource(getattr(base, m)) for m in (
        "on_body", "on_message_complete", "connection_lost", "shutdown", "on_response_complete", "data_received"))
    used = set(re.findall(r"self\.cycle\.(\w+)", cycle_uses))
    assert used <= {"body", "more_body", "message_event", "disconnected", "keep_alive", "response_complete"}, used
    assert httptools_impl.STATUS_LINE[500] == b"HTTP/1.1 500 Internal Server Error\r\n"
    assert flow_control.HIGH_WATER_LIMIT == 65536
    send = inspect.getsource(httptools_impl.RequestResponseCycle.send)
    assert "self.access_logger.info(" in send and "get_path_with_query_string(self.scope)" in send


def test_the_upgrade_and_the_end_of_input_the_subclass_takes_over() -> None:
    """app/http/protocol.py defers handle_websocket_upgrade until the request before it is answered,
    and answers a half-closed connection (eof_received): uvicorn's upgrade is still called from
    data_received's HttpParserUpgrade with no argument, makes no cycle for the upgrade request (its
    on_headers_complete returns first), rebuilds the request from the scope and url, and hands the
    transport over; its eof_received still does nothing (asyncio then closes)."""
    base = httptools_impl.HttpToolsProtocol
    assert _parameters(base.handle_websocket_upgrade) == ["self"]
    received = inspect.getsource(base.data_received)
    assert "except httptools.HttpParserUpgrade:" in received and "self.handle_websocket_upgrade()" in received
    headers = inspect.getsource(base.on_headers_complete)
    upgrade_check = "if self.parser.should_upgrade() and self._should_upgrade():\n            return"
    assert upgrade_check in headers and headers.index(upgrade_check) < headers.index("RequestResponseCycle(")
    for method in (base.on_body, base.on_message_complete):  # the previous cycle is left alone
        assert "self.parser.should_upgrade() and self._should_upgrade()" in inspect.getsource(method)
    upgrade = inspect.getsource(base.handle_websocket_upgrade)
    assert 'self.scope["method"]' in upgrade and 'self.scope["headers"]' in upgrade and "self.url" in upgrade
    assert "self.transport.set_protocol(protocol)" in upgrade
    lines = [line.strip() for line in inspect.getsource(base.eof_received).splitlines()]
    assert lines[1:] == ["pass", ""] or lines[1:] == ["pass"]


def test_the_keep_alive_clock_the_subclass_takes_over() -> None:
    """app/http/protocol.py replaces on_response_complete (its keep-alive timer on the connection's one timer)
    and _unset_keepalive_if_required: uvicorn's must still be what it copies, and the keep-alive
    timer must be set nowhere else."""
    base = httptools_impl.HttpToolsProtocol
    body = [line.strip() for line in inspect.getsource(base.on_response_complete).splitlines()
            if line.strip() and not line.strip().startswith("#")]
    assert body == [
        "def on_response_complete(self) -> None:",
        "self.server_state.total_requests += 1",
        "if self.transport.is_closing():", "return",
        "self._unset_keepalive_if_required()",
        "self.flow.resume_reading()",
        "if self.pipeline:", "cycle, app = self.pipeline.pop()", "self._start_asgi_task(cycle, app)",
        "else:", "self.timeout_keep_alive_task = self.loop.call_later(",
        "self.timeout_keep_alive, self.timeout_keep_alive_handler", ")",
    ]
    source = inspect.getsource(httptools_impl)
    assert source.count("self.timeout_keep_alive_task = self.loop.call_later(") == 1
    # data_received, connection_lost, on_response_complete
    assert source.count("self._unset_keepalive_if_required()") == 3
    assert "self.transport.close()" in inspect.getsource(base.timeout_keep_alive_handler)


def test_the_websocket_protocol_keepalive_timeout_and_the_state_the_subclass_reads() -> None:
    base = WebSocketsSansIOProtocol
    assert _parameters(base.keepalive_timeout) == ["self"]
    assert _assigns(base, "__init__", "disconnected")
    assert _assigns(base, "connection_made", "transport")


def test_the_websocket_protocol_s_frame_delivery_the_subclass_takes_over() -> None:
    """The subclass's send_receive_event_to_app hands a whole frame (`frames`, of the type
    `curr_msg_data_type`) to the stream's hook, else to this method: which queues it for `receive`."""
    base = WebSocketsSansIOProtocol
    assert _parameters(base.send_receive_event_to_app) == ["self"]
    assert _assigns(base, "__init__", "frames", "curr_msg_data_type", "queue", "close_sent")
    assert _assigns(base, "handle_connect", "scope")
    for handler in (base.handle_text, base.handle_bytes):  # a whole frame: delivered by this method
        source = inspect.getsource(handler)
        assert "self.frames = [event.data]" in source and "self.send_receive_event_to_app()" in source
    source = inspect.getsource(base.send_receive_event_to_app)
    assert "self.frames = []" in source and 'self.queue.put_nowait({"type": "websocket.receive"' in source


def test_the_websocket_protocol_s_send_the_frame_writer_does_in_its_stead() -> None:
    """The subclass's write_frame (FRAME_WRITE) does what `send` does with a websocket.send, under
    the conditions where `send` neither waits nor refuses: accepted, writable, not closing."""
    base = WebSocketsSansIOProtocol
    assert _assigns(base, "__init__", "conn", "writable", "handshake_complete", "close_sent", "disconnected")
    send = inspect.getsource(base.send)
    assert send.index("await self.writable.wait()") < send.index("if self.disconnected:")
    assert "self.handshake_complete = True" in send
    assert "elif not self.close_sent and self.initial_response is None" in send
    assert "self.conn.send_binary(bytes_data)" in send and "self.conn.send_text(text_data.encode())" in send
    assert 'output = self.conn.data_to_send()\n                    self.transport.write(b"".join(output))' in send
    assert "except InvalidState:" in send  # what the state check (not OPEN) stands in for
    assert _parameters(base.handle_connect) == ["self", "event"]


def test_the_websocket_protocol_s_data_received_the_subclass_goes_around() -> None:
    """The subclass hands a chunk that is one whole data frame to the stream's hook itself (as
    send_receive_event_to_app would after websockets parsed it), else calls this method: which gives
    every byte to websockets and dispatches its events; handle_connect marks the handshake begun."""
    base = WebSocketsSansIOProtocol
    assert _parameters(base.data_received) == ["self", "data"]
    source = inspect.getsource(base.data_received)
    assert "self.conn.receive_data(data)" in source and "self.handle_events()" in source
    assert _assigns(base, "handle_connect", "handshake_initiated")
    assert "max_size=self.config.ws_max_size" in inspect.getsource(base.__init__)


def test_the_subclasses_build_on_these_classes() -> None:
    assert issubclass(http_protocol(10.0), httptools_impl.HttpToolsProtocol)
    assert issubclass(websocket_protocol(), WebSocketsSansIOProtocol)


def test_the_package_init_that_serve_leaves_out_only_names_what_complete_uvicorn_adds() -> None:
    """`server.uvicorn_server` starts without uvicorn/__init__.py, with Config set on the package: what
    uvicorn imports from the package itself must be Config alone, and the __init__ what it was."""
    from pathlib import Path

    root = Path(uvicorn.__file__).parent
    lines = [line for line in (root / "__init__.py").read_text().splitlines() if line.startswith(("from", "import"))]
    assert lines == ["from uvicorn.config import Config", "from uvicorn.main import Server, main, run"]
    from_package = {name.strip() for path in root.rglob("*.py") if path.name != "__main__.py"
                    for names in re.findall(r"^\s*from uvicorn import (.+)$", path.read_text(), re.M)
                    for name in names.split(",")}
    assert from_package <= {"Config"}, from_package
