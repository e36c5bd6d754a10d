"""The WebSocket side of `chunkmq serve`: uvicorn's websockets-sansio protocol with a dead peer aborted
and whole frames handed to the streams' hook (app/api/streams.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at run time by `serve`, once the cyclic GC is off (app/http/server.py)
    import asyncio


def websocket_protocol() -> type[asyncio.Protocol]:
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


def websocket_protocol_on_upgrade() -> Callable[..., asyncio.Protocol]:
    """What uvicorn makes a WebSocket's protocol with: `websocket_protocol()`'s class, built (and the
    websockets library loaded) at the first upgrade, or by warm_up, rather than before a restart
    answers (app/start.py)."""
    made: list[type[asyncio.Protocol]] = []

    def protocol(**kwargs: Any) -> asyncio.Protocol:
        if not made:
            made.append(websocket_protocol())
        return made[0](**kwargs)

    return protocol

