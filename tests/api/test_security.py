"""Secrets and permissions against real servers: tokens never reach the log, lists show what a token
may touch, a tokenless server refuses other sites and other host names, /metrics can need a token."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.api.client import error, ok
from tests.api.test_auth import client, create_token
from tests.broker.test_message import binary_body
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    data = Path(tmp_path_factory.mktemp("secured")) / "data"
    proc = ServerProcess(data, CHUNKMQ_LOG_LEVEL="info", CHUNKMQ_METRICS_REQUIRE_TOKEN="true").start()
    yield proc  # type: ignore[misc]
    proc.stop()


def admin_token(server: ServerProcess) -> str:
    return (server.data_dir / "admin-token").read_text().strip()


def test_a_token_in_the_query_is_not_logged(secured: ServerProcess) -> None:
    with client(secured, admin_token(secured)) as api:
        ok(api.put("/api/v1/queues/logged", json={}), 201)
    token = create_token(secured.data_dir, "--name", "query", "--read", "^logged$")  # never printed by the server

    async def main() -> None:
        url = f"ws://127.0.0.1:{secured.port}/api/v1/queues/logged/groups/g/stream?consumer=c&token={token}"
        async with connect(url, compression=None) as ws:
            await ws.send(b'{"type":"ping"}')
            await asyncio.wait_for(ws.recv(), 5)

    asyncio.run(main())
    httpx.get(f"{secured.url}/api/v1/overview?token={token}")  # an HTTP access line too
    log = secured.log()
    assert "WebSocket /api/v1/queues/logged/groups/g/stream" in log, log[-2000:]
    assert "token=[redacted]" in log
    assert token not in log


def test_lists_show_only_what_a_token_may_touch(secured: ServerProcess) -> None:
    with client(secured, admin_token(secured)) as admin:
        for q in ("orders", "eu", "hr-salaries"):
            ok(admin.put(f"/api/v1/queues/{q}", json={}), 201)
        for x in ("orders-x", "hr-x"):
            ok(admin.put(f"/api/v1/exchanges/{x}", json={"type": "fanout"}), 201)
        ok(admin.post("/api/v1/bindings", json={"exchange": "hr-x", "queue": "hr-salaries"}), 201)
        ok(admin.post("/api/v1/bindings", json={"exchange": "orders-x", "queue": "orders"}), 201)
        assert {"orders", "eu", "hr-salaries"} <= {q["name"] for q in ok(admin.get("/api/v1/queues"))}
    token = create_token(secured.data_dir, "--name", "limited", "--write", "^orders.*$", "--read", "^eu$")
    with client(secured, token) as api:
        assert {q["name"] for q in ok(api.get("/api/v1/queues"))} == {"orders", "eu"}
        assert {e["name"] for e in ok(api.get("/api/v1/exchanges"))} == {"orders-x"}
        assert [(b["exchange"], b["queue"]) for b in ok(api.get("/api/v1/bindings"))] == [("orders-x", "orders")]
        # what a list hides, its own route refuses, without saying whether it exists (app/api/access.py)
        for path in ("/api/v1/queues/hr-salaries/groups", "/api/v1/queues/hr-salaries", "/api/v1/exchanges/hr-x",
                     "/api/v1/queues/no-such-queue"):
            assert "hr-" not in error(api.get(path), 403, "forbidden")


def test_metrics_can_require_a_token(secured: ServerProcess) -> None:
    error(httpx.get(f"{secured.url}/metrics"), 401, "unauthorized")
    response = httpx.get(f"{secured.url}/metrics", headers={"authorization": f"Bearer {admin_token(secured)}"})
    assert response.status_code == 200 and "chunkmq_queue_messages" in response.text


def test_metrics_are_open_by_default(shared_server: ServerProcess) -> None:
    assert httpx.get(f"{shared_server.url}/metrics").status_code == 200


def test_without_auth_other_sites_and_host_names_are_refused(shared_server: ServerProcess, name: str) -> None:
    url = shared_server.url
    with httpx.Client(base_url=url) as api:
        ok(api.put(f"/api/v1/queues/{name}", json={}), 201)
        attack = {"messages": [{"body": "x"}]}
        # DNS rebinding: the page's own host name, pointing at 127.0.0.1
        error(api.get("/api/v1/queues", headers={"host": "attacker.example"}), 400, "invalid_host")
        error(api.get("/healthz", headers={"host": "attacker.example"}), 400, "invalid_host")
        error(api.post(f"/api/v1/queues/{name}/publish", json=attack, headers={"origin": "http://attacker.example"}),
              403, "cross_origin")
        error(api.post(f"/api/v1/queues/{name}/purge", headers={"origin": "null"}), 403, "cross_origin")
        error(api.post(f"/api/v1/queues/{name}/publish", content=b'{"messages":[{"body":"x"}]}',
                       headers={"content-type": "text/plain"}), 415, "unsupported_media_type")
        assert ok(api.get(f"/api/v1/queues/{name}"))["messages"] == 0  # nothing got through
        # the same origin, localhost, and clients that send no Origin (curl, SDKs) are served
        same = {"origin": f"http://127.0.0.1:{shared_server.port}"}
        ok(api.post(f"/api/v1/queues/{name}/publish", json=attack, headers=same))
        ok(api.get("/api/v1/queues", headers={"host": f"localhost:{shared_server.port}"}))
        ok(api.post(f"/api/v1/queues/{name}/publish", json=attack))
        # a binary batch needs a CORS preflight as JSON does, so it is served too
        ok(api.post(f"/api/v1/queues/{name}/publish", content=binary_body((b"", b"x", 0)),
                    headers={"content-type": "application/vnd.chunkmq.batch"}))

    async def ws_refused() -> None:
        ws_url = f"ws://127.0.0.1:{shared_server.port}/api/v1/exchanges/amq.default/stream"
        with pytest.raises(InvalidStatus) as refused:  # the handshake is answered, and refused
            async with connect(ws_url, origin="http://attacker.example", compression=None):  # type: ignore[arg-type]
                pass
        assert refused.value.response.status_code == 403

    asyncio.run(ws_refused())


def test_token_list_shows_last_use_written_behind(tmp_path: Path) -> None:
    import subprocess
    import sys

    server = ServerProcess(tmp_path / "data").start()
    try:
        token = create_token(server.data_dir, "--name", "used-one", "--read", ".*")
        create_token(server.data_dir, "--name", "never-used")

        def listed() -> dict[str, str]:
            command = [sys.executable, "-m", "chunkmq.cli", "token", "list", "--data-dir", str(server.data_dir)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            rows = [line for line in out.splitlines() if "used-one" in line or "never-used" in line]
            return {("used-one" if "used-one" in r else "never-used"): r.split("│")[-2].strip()
                    for r in rows}

        with client(server, token) as api:
            ok(api.get("/api/v1/queues"))
        deadline = time.monotonic() + 15  # the write-behind job runs every 5 s
        while not (seen := listed())["used-one"]:
            assert time.monotonic() < deadline, seen
            time.sleep(0.5)
        assert seen["used-one"].startswith("20") and seen["never-used"] == "", seen
    finally:
        server.stop()
