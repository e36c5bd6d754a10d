"""Bearer tokens and per-resource permissions against a real server with auth on (the default)."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.client import error, ok
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(Path(tmp_path_factory.mktemp("auth")) / "data").start()
    yield proc
    proc.stop()


def create_token(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """`chunkmq token create`, with the server's environment (`env`: its CHUNKMQ_DATABASE_URL)."""
    result = subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "token", "create", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, check=True, env=env,
    )
    return result.stdout.strip()


def client(server: ServerProcess, token: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def test_first_start_writes_a_private_admin_token(secured: ServerProcess) -> None:
    path = secured.data_dir / "admin-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text().strip()
    with client(secured, token) as admin:
        ok(admin.put("/api/v1/queues/admin-q", json={}), 201)


def test_no_or_bad_token_is_401(secured: ServerProcess) -> None:
    with client(secured, None) as anonymous:
        response = anonymous.get("/api/v1/queues")
        error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    with client(secured, "cmq_not-a-real-token") as wrong:
        error(wrong.get("/api/v1/queues"), 401, "unauthorized")
    with client(secured, None) as anonymous:  # health and metrics stay open for probes
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/metrics").status_code == 200


def test_permissions_per_verb(secured: ServerProcess) -> None:
    admin_token = (secured.data_dir / "admin-token").read_text().strip()
    with client(secured, admin_token) as admin:
        ok(admin.put("/api/v1/exchanges/app.events", json={"type": "fanout"}), 201)
        ok(admin.put("/api/v1/queues/app.q", json={}), 201)
        ok(admin.put("/api/v1/queues/other.q", json={}), 201)
        ok(admin.post("/api/v1/bindings", json={"exchange": "app.events", "queue": "app.q"}), 201)
    producer = create_token(secured.data_dir, "--name", "producer", "--write", r"app\..*")
    consumer = create_token(secured.data_dir, "--name", "consumer", "--read", r"app\..*")
    operator = create_token(secured.data_dir, "--name", "operator", "--configure", r"app\..*")
    message = {"messages": [{"body": "x"}]}
    with client(secured, producer) as p:
        ok(p.post("/api/v1/exchanges/app.events/publish", json=message))
        error(p.post("/api/v1/queues/other.q/publish", json=message), 403, "forbidden")
        error(p.post("/api/v1/queues/app.q/groups/g/pull", json={}), 403, "forbidden")
        error(p.put("/api/v1/queues/app.new", json={}), 403, "forbidden")
        error(p.get("/api/v1/queues/app.q/messages"), 403, "forbidden")
    with client(secured, consumer) as c:
        assert len(ok(c.post("/api/v1/queues/app.q/groups/g/pull", json={}))["messages"]) == 1
        ok(c.post("/api/v1/queues/app.q/groups/g/ack", json={"up_to": 1}))
        error(c.post("/api/v1/queues/other.q/groups/g/pull", json={}), 403, "forbidden")
        error(c.post("/api/v1/exchanges/app.events/publish", json=message), 403, "forbidden")
        error(c.delete("/api/v1/queues/app.q"), 403, "forbidden")
    with client(secured, operator) as o:
        ok(o.put("/api/v1/queues/app.new", json={}), 201)
        ok(o.delete("/api/v1/queues/app.new"), 204)
        error(o.put("/api/v1/queues/other.new", json={}), 403, "forbidden")
        error(o.post("/api/v1/exchanges/app.events/publish", json=message), 403, "forbidden")


def test_auth_off_is_refused_off_loopback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)],
        env={"CHUNKMQ_AUTH": "off", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "CHUNKMQ_AUTH=off is refused" in result.stderr


def test_a_token_checked_before_keeps_working_while_the_database_is_unreachable(tmp_path: Path) -> None:
    """Past its cache time a token is looked up again; when the database does not answer (here a
    PostgreSQL URL where nothing listens), the last answer stands, and an unknown token gets the
    database's error (503 unavailable)."""
    from sqlalchemy.exc import OperationalError

    from chunkmq.api.auth import TokenAuth
    from chunkmq.meta import MetaStore, upgrade
    from tests.server import free_port

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    upgrade(url)
    with MetaStore(url) as meta, MetaStore(f"postgresql+psycopg://x@127.0.0.1:{free_port()}/x") as gone:
        _, plain = meta.create_token("ci", write="orders")
        auth = TokenAuth(meta, enabled=True)

        async def scenario() -> None:
            assert (await auth.principal(plain)).name == "ci"
            auth.meta = gone
            auth._cache = {key: (0.0, principal) for key, (_, principal) in auth._cache.items()}  # expired
            assert (await auth.principal(plain)).permissions.allows("write", "orders")
            with pytest.raises(OperationalError):
                await auth.principal(plain + "x")
            with pytest.raises(OperationalError):
                await auth.flush_last_used()
            auth.meta = meta
            assert await auth.flush_last_used() == 1  # kept for the flush after the outage

        asyncio.run(scenario())
        assert meta.list_tokens()[0].last_used_at is not None
