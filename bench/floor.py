"""The bare ASGI floor of W8: an app that reads the request body and answers a small JSON (and, over
WebSocket, answers each frame with a small JSON), run on exactly the server stack and options
`chunkmq serve` uses (app/http/server.py `uvicorn_options`). What chunkmq costs per request is its figure
minus this one's.

`python -m bench.floor PORT` serves it on 127.0.0.1:PORT until SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path
from tempfile import gettempdir

from starlette.types import Receive, Scope, Send

ANSWER = b'{"results":[{"offset":0}],"durability":"written"}'  # the size of a one-message publish's answer
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while (await receive())["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": ANSWER.decode()})
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})


def main(port: int) -> None:
    import uvicorn

    from chunkmq.config import Settings
    from chunkmq.http.server import uvicorn_options

    settings = Settings(host="127.0.0.1", port=port, log_level="warning", data_dir=Path(gettempdir()))
    uvicorn.run(app, **uvicorn_options(settings))


if __name__ == "__main__":
    main(int(sys.argv[1]))
