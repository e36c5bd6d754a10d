"""app/http/websocket.py: the WebSocket protocol `chunkmq serve` upgrades to. Its behaviour is tested
end to end in tests/http/test_protocol.py (frames to the streams' hook) and
tests/api/test_streams_heartbeat.py (a dead peer aborted); its uvicorn base in test_uvicorn_shape.py."""

from __future__ import annotations

import subprocess
import sys

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from chunkmq.http.websocket import websocket_protocol


def test_the_protocol_is_uvicorn_s_sansio_one_with_the_dead_peer_abort() -> None:
    protocol = websocket_protocol()
    assert issubclass(protocol, WebSocketsSansIOProtocol)
    overridden = {"data_received", "handle_connect", "keepalive_timeout", "send_receive_event_to_app"}
    assert {name for name in overridden if name in vars(protocol)} == overridden


def test_the_websockets_library_loads_at_the_first_upgrade_not_before() -> None:
    code = (
        "import sys\n"
        "from chunkmq.http.websocket import websocket_protocol_on_upgrade\n"
        "make = websocket_protocol_on_upgrade()\n"
        "print('websockets' in sys.modules)\n"
        "try:\n"
        "    make()\n"
        "except TypeError:\n"  # uvicorn's arguments are missing: the class was built all the same
        "    pass\n"
        "print('websockets' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["False", "True"]
