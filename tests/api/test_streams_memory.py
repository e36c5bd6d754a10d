"""What an idle consume stream costs and leaves behind (docs/scaling.md, "Connections").

In process: a real uvicorn server on the app, with `chunkmq serve`'s WebSocket protocol, and raw
WebSocket consumers that upgrade by hand; the live stream objects are counted with the garbage
collector while they are open and after they closed, so a per-connection object that outlives its
connection fails the test. On a real `chunkmq serve`: a client offering permessage-deflate (as the
`websockets` library and browsers do by default) gets plain frames, since the deflate state is most
of an idle connection's memory.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import os
from pathlib import Path

import httpx
import uvicorn
from websockets.asyncio.client import connect

from chunkmq.api.streams import _ConsumeStream
from chunkmq.config import Settings
from chunkmq.http.websocket import websocket_protocol
from chunkmq.main import create_app
from tests.api.test_streams import consume_url, run
from tests.server import ServerProcess, free_port

CONNECTIONS = 40


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)


async def _raw_consumer(port: int, consumer: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Upgrade to a consume stream by hand and grant credit, then stay idle."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET /api/v1/queues/idle/groups/g/stream?consumer={consumer} HTTP/1.1\r\n"
                 f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    payload, mask = b'{"type":"credit","n":10}', os.urandom(4)
    writer.write(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    await writer.drain()
    return reader, writer


async def _until(condition: object, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.1)
    return bool(condition())  # type: ignore[operator]


def test_closed_consume_streams_leave_no_stream_objects(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", auth="off", log_level="warning")
    port = free_port()
    protocol = websocket_protocol()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, ws=protocol,
                            ws_per_message_deflate=False, log_level="warning")
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        try:
            assert await _until(lambda: server.started, 30)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as api:
                (await api.put("/api/v1/queues/idle", json={})).raise_for_status()
                (await api.put("/api/v1/queues/idle/groups/g", json={})).raise_for_status()
            before = _live(_ConsumeStream), _live(protocol)
            tasks = _live(asyncio.Task)
            consumers = [await _raw_consumer(port, f"c{i}") for i in range(CONNECTIONS)]
            assert await _until(lambda: _live(_ConsumeStream) == before[0] + CONNECTIONS, 10)
            assert _live(protocol) == before[1] + CONNECTIONS
            for _reader, writer in consumers:
                writer.close()
            del consumers
            assert await _until(lambda: (_live(_ConsumeStream), _live(protocol)) == before, 10), \
                (_live(_ConsumeStream), _live(protocol), before)
            assert _live(asyncio.Task) <= tasks + 2  # two per open stream before; periodic jobs may come and go
        finally:
            server.should_exit = True
            await serving

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_server_does_not_negotiate_permessage_deflate(shared_server: ServerProcess) -> None:
    httpx.put(f"{shared_server.url}/api/v1/queues/deflate", json={}).raise_for_status()

    async def main() -> None:
        async with connect(consume_url(shared_server, "deflate")) as ws:  # offers permessage-deflate
            assert ws.response is not None
            assert "Sec-WebSocket-Extensions" not in ws.response.headers

    run(main())
