"""An error in a consume stream's sender (a corrupt chunk, a deleted queue) reaches the client as an
error frame and a close with 4000 + its status, and is logged: the client never waits for ever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.api.client import ok
from tests.api.test_streams import closed_with, consume_url, open_ws, recv, run, send, synced
from tests.server import ServerProcess


def test_corrupt_chunk_ends_the_stream_with_an_error_frame(tmp_path: Path) -> None:
    # Tiny chunks: the filler seals the marker's chunk.
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off", CHUNKMQ_CHUNK_SIZE="4096").start()
    try:
        marker = b"corrupt-me-" + b"x" * 200
        with httpx.Client(base_url=server.url) as api:
            ok(api.put("/api/v1/queues/q", json={}), 201)
            ok(api.post("/api/v1/queues/q/publish", json={"messages": [{"body": marker.decode()}]}))
            ok(api.put("/api/v1/queues/filler", json={}), 201)
            for _ in range(6):
                ok(api.post("/api/v1/queues/filler/publish", json={"messages": [{"body": "f" * 1500}]}))
        # Flip a byte inside the stored body of the sealed chunk while the server is down: a restart
        # trusts a cleanly sealed chunk, so the damage is found by the read, as bit rot would be.
        server.stop()
        chunk = sorted((server.data_dir / "store" / "log").glob("*.chunk"))[0]
        at = chunk.read_bytes().index(marker) + 50
        with open(chunk, "r+b") as f:
            f.seek(at)
            f.write(b"Y")
        server.start()

        async def main() -> None:
            async with open_ws(consume_url(server, "q")) as ws:
                await send(ws, type="credit", n=10)
                frame = await recv(ws)
                assert frame["type"] == "error" and frame["error"]["code"] == "corrupt_chunk", frame
                assert await closed_with(ws) == 4500

        run(main())
    finally:
        server.stop()
    log = server.log()
    assert "consume stream q/g" in log and "corrupt_chunk" in log, log[-3000:]


def test_deleted_queue_ends_the_stream(shared_server: ServerProcess, name: str) -> None:
    with httpx.Client(base_url=shared_server.url) as api:
        ok(api.put(f"/api/v1/queues/{name}", json={}), 201)

        async def main() -> None:
            async with open_ws(consume_url(shared_server, name)) as ws:
                await send(ws, type="credit", n=10)
                await synced(ws)
                await asyncio.to_thread(lambda: ok(api.delete(f"/api/v1/queues/{name}"), 204))
                frame = await recv(ws)
                assert frame["type"] == "error" and frame["error"]["code"] == "queue_not_found", frame
                assert await closed_with(ws) == 4404

        run(main())
    assert f"consume stream {name}/g" in shared_server.log()
