"""GET|POST /api/v1/definitions and `chunkmq definitions export|import` between two real servers
with auth on: a round trip gives equal definitions; only administrators may export or import; bad
and conflicting documents get API errors and change nothing. With the metadata in SQLite and in
PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.api.client import error, ok
from tests.api.test_auth import client, create_token
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory, database_env: Callable[[], dict[str, str]]
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two servers, each with its own metadata database (SQLite, or PostgreSQL)."""
    root = Path(tmp_path_factory.mktemp("definitions"))
    source = ServerProcess(root / "source", **database_env()).start()
    target = ServerProcess(root / "target", **database_env()).start()
    yield source, target
    source.stop()
    target.stop()


def admin(server: ServerProcess) -> httpx.Client:
    return client(server, (server.data_dir / "admin-token").read_text().strip())


def cli(server: ServerProcess, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**server.env, "CHUNKMQ_URL": server.url,
           "CHUNKMQ_TOKEN": (server.data_dir / "admin-token").read_text().strip()}
    return subprocess.run([sys.executable, "-m", "chunkmq.cli", "definitions", *args], env=env, input=stdin,
                          capture_output=True, check=False)


def declare(api: httpx.Client) -> None:
    ok(api.put("/api/v1/exchanges/orders", json={"type": "topic", "alternate_exchange": "unrouted"}), 201)
    ok(api.put("/api/v1/exchanges/unrouted", json={"type": "fanout"}), 201)
    ok(api.put("/api/v1/exchanges/by-header", json={"type": "headers"}), 201)
    ok(api.put("/api/v1/queues/eu", json={"max_messages": 1000, "overflow": "reject_publish",
                                          "dead_letter_exchange": "unrouted", "max_deliveries": 3}), 201)
    ok(api.put("/api/v1/queues/parked", json={"max_age_seconds": 3600}), 201)
    ok(api.post("/api/v1/bindings", json={"exchange": "orders", "queue": "eu", "routing_key": "eu.*"}), 201)
    ok(api.post("/api/v1/bindings", json={"exchange": "unrouted", "queue": "parked"}), 201)
    ok(api.post("/api/v1/bindings", json={"exchange": "by-header", "queue": "parked",
                                          "arguments": {"x-match": "any", "kind": "audit"}}), 201)
    ok(api.put("/api/v1/queues/eu/groups/billing", json={"tag_filter": ["created", "paid"]}), 201)
    ok(api.put("/api/v1/queues/parked/groups/ops", json={}), 201)
    ok(api.post("/api/v1/exchanges/orders/publish", json={"messages": [{"body": "m", "routing_key": "eu.1"}]}))


def test_round_trip_through_the_cli_gives_equal_definitions(
    servers: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    source, target = servers
    create_token(source.data_dir, "--name", "shop", "--write", "orders", "--read", "eu", env=source.env)
    with admin(source) as api:
        declare(api)
        exported = ok(api.get("/api/v1/definitions"))
    assert {e["name"] for e in exported["exchanges"]} == {"orders", "unrouted", "by-header"}
    assert [t["token"] for t in exported["permissions"]] == ["admin (bootstrap)", "shop"]
    assert not {"messages", "first_offset", "next_offset"} & {k for q in exported["queues"] for k in q}
    assert {k for g in exported["groups"] for k in g} == {"queue", "name", "tag_filter"}  # no offsets

    file = tmp_path / "definitions.json"
    done = cli(source, "export", "--file", str(file))
    assert done.returncode == 0, done.stderr
    assert orjson.loads(file.read_bytes()) == exported
    done = cli(target, "import", str(file))
    assert done.returncode == 0, done.stderr
    created = orjson.loads(done.stdout)
    assert [t["token"] for t in created] == ["shop"]  # "admin" exists there with the same permissions

    with admin(target) as api:
        assert ok(api.get("/api/v1/definitions")) == exported
        ok(api.post("/api/v1/exchanges/orders/publish", json={"messages": [{"body": "m", "routing_key": "eu.1"}]}))
        assert ok(api.get("/api/v1/queues/eu"))["messages"] == 1  # routing came across, messages did not
    with client(target, created[0]["secret"]) as shop:  # the created token has the exported permissions
        ok(shop.post("/api/v1/queues/eu/groups/billing/pull", json={"max_messages": 1}))
        error(shop.post("/api/v1/queues/parked/groups/ops/pull", json={}), 403, "forbidden")

    # importing the same document again, from standard input, changes nothing
    done = cli(target, "import", "-", stdin=file.read_bytes())
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    with admin(target) as api:
        assert ok(api.get("/api/v1/definitions")) == exported


def test_only_administrators_export_or_import(servers: tuple[ServerProcess, ServerProcess]) -> None:
    source, _ = servers
    everything = create_token(source.data_dir, "--name", "almost", "--configure", ".*", "--write", ".*",
                              "--read", ".*", env=source.env)
    with client(source, everything) as api:
        error(api.get("/api/v1/definitions"), 403, "forbidden")
        error(api.post("/api/v1/definitions", json={"queues": [{"name": "sneaky"}]}), 403, "forbidden")
    with client(source, None) as anonymous:
        error(anonymous.get("/api/v1/definitions"), 401, "unauthorized")
    with admin(source) as api:
        assert "sneaky" not in [q["name"] for q in ok(api.get("/api/v1/queues"))]


def test_bad_or_conflicting_imports_change_nothing(servers: tuple[ServerProcess, ServerProcess]) -> None:
    _, target = servers
    with admin(target) as api:
        ok(api.put("/api/v1/queues/settled", json={"max_messages": 10}), 201)
        before = ok(api.get("/api/v1/definitions"))
        bad: list[tuple[Any, int, str, str]] = [
            ({"queues": [{"name": "fresh"}, {"name": "x y"}]}, 400, "invalid_name", "queues[1]"),
            ({"queues": [{"name": "fresh"}], "groups": [{"queue": "nowhere", "name": "g"}]}, 404,
             "queue_not_found", "groups[0]"),
            ({"queues": [{"name": "fresh"}, {"name": "settled", "max_messages": 11}]}, 409,
             "precondition_failed", "queues[1]"),
            ({"tables": []}, 400, "invalid_body", "tables"),
            ([1, 2], 400, "invalid_body", "object"),
        ]
        for doc, status, code, named in bad:
            assert named in error(api.post("/api/v1/definitions", json=doc), status, code)
        error(api.post("/api/v1/definitions", content=b"{", headers={"content-type": "application/json"}),
              400, "invalid_body")
        assert ok(api.get("/api/v1/definitions")) == before
    done = cli(target, "import", "-", stdin=b'{"queues": [{"name": "x y"}]}')
    assert done.returncode == 1 and b"400" in done.stderr and b"queues[0]" in done.stderr
