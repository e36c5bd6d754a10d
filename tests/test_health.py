import signal

import httpx

from tests.server import ServerProcess


def test_healthz_and_clean_shutdown(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    # uvicorn re-raises SIGTERM after its graceful shutdown, so -SIGTERM is a clean exit.
    assert server.stop() in (0, -signal.SIGTERM)
