"""Every route of the OpenAPI document and every WebSocket route, tried with five credentials: none,
a wrong token, a token with no permission on the route's objects (a stranger), a token with exactly
the permission its rule needs, and an admin token. A route added without a CASES entry fails here;
one without a rule in app/api/access.py is not even mounted."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from chunkmq.api.access import RULES, Need, RouteWithoutRule, rule
from chunkmq.api.router import routers
from chunkmq.config import Settings
from chunkmq.main import create_app
from chunkmq.meta import MetaStore
from tests.server import ServerProcess

Q, X, G = "vault-q", "vault-x", "vault-g"  # what a stranger must never read back
NAMES = (Q, X, G)
PARAMS = {"name": Q, "queue": Q, "group": G}
SMTP_NOT_CONFIGURED = 409


@dataclass(frozen=True)
class Case:
    """How to call a route: `ok` is the status once authorised (with the objects above present)."""

    ok: int = 200
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)  # path parameters besides PARAMS
    exact: dict[str, str] | None = None  # the permissions a token needs, when no resource rule says it
    stranger: int | None = None  # a token without permission, when not 403 (broker-wide reads, ids)


MESSAGE = {"messages": [{"body": "x"}]}
CASES: dict[str, Case] = {
    "GET /healthz": Case(),
    "GET /readyz": Case(),
    "GET /metrics": Case(),
    "GET /api/v1/overview": Case(),
    "GET /api/v1/storage/chunks": Case(),
    "GET /api/v1/messages/{message_id}": Case(exact={"read": Q}, stranger=404),
    "GET /api/v1/definitions": Case(),
    "POST /api/v1/definitions": Case(body={}),
    "GET /api/v1/exchanges": Case(),
    "GET /api/v1/exchanges/{name}": Case(params={"name": X}),
    "PUT /api/v1/exchanges/{name}": Case(body={"type": "fanout"}, params={"name": X}),
    "DELETE /api/v1/exchanges/{name}": Case(204, params={"name": X}),
    "POST /api/v1/exchanges/{name}/publish": Case(body=MESSAGE, params={"name": X}),
    "WEBSOCKET /api/v1/exchanges/{name}/stream": Case(params={"name": X}),
    "GET /api/v1/queues": Case(),
    "GET /api/v1/queues/{name}": Case(),
    "PUT /api/v1/queues/{name}": Case(body={}),
    "PATCH /api/v1/queues/{name}": Case(body={"producer_visible": True}),
    "DELETE /api/v1/queues/{name}": Case(204, query={"force": "true"}),
    "POST /api/v1/queues/{name}/purge": Case(),
    "GET /api/v1/queues/{name}/messages": Case(),
    "POST /api/v1/queues/{name}/search": Case(body={}),
    "GET /api/v1/queues/{name}/scheduled": Case(),
    "POST /api/v1/queues/{name}/publish": Case(body=MESSAGE),
    "GET /api/v1/queues/{queue}/history": Case(),
    "GET /api/v1/queues/{queue}/groups": Case(),
    "GET /api/v1/queues/{queue}/groups/{group}": Case(),
    "PUT /api/v1/queues/{queue}/groups/{group}": Case(body={}),
    "DELETE /api/v1/queues/{queue}/groups/{group}": Case(204),
    "POST /api/v1/queues/{queue}/groups/{group}/pull": Case(body={}),
    "POST /api/v1/queues/{queue}/groups/{group}/ack": Case(body={"up_to": 0}),
    "POST /api/v1/queues/{queue}/groups/{group}/nack": Case(body={"offsets": [0]}),
    "POST /api/v1/queues/{queue}/groups/{group}/seek": Case(body={"to": "earliest"}),
    "POST /api/v1/queues/{queue}/groups/{group}/pause": Case(body={}),
    "POST /api/v1/queues/{queue}/groups/{group}/resume": Case(body={}),
    "GET /api/v1/queues/{queue}/groups/{group}/history": Case(),
    "GET /api/v1/queues/{queue}/groups/{group}/inflight": Case(),
    "WEBSOCKET /api/v1/queues/{queue}/groups/{group}/stream": Case(),
    "GET /api/v1/queues/{queue}/groups/{group}/events": Case(),
    "GET /api/v1/bindings": Case(),
    "POST /api/v1/bindings": Case(body={"exchange": X, "queue": Q}, exact={"write": Q, "read": X},
                                    stranger=403),
    "DELETE /api/v1/bindings/{binding_id}": Case(204, exact={"write": Q, "read": X}, stranger=404),
    "GET /api/v1/alerts": Case(),
    "GET /api/v1/alerts/rules": Case(),
    "POST /api/v1/alerts/rules": Case(201, body={"kind": "lag_messages", "queue": Q, "threshold": 5}),
    "GET /api/v1/alerts/rules/{rule_id}": Case(),
    "PUT /api/v1/alerts/rules/{rule_id}": Case(body={"kind": "lag_messages", "queue": Q, "threshold": 6}),
    "DELETE /api/v1/alerts/rules/{rule_id}": Case(204),
    "GET /api/v1/alerts/events": Case(),
    "POST /api/v1/alerts/test-email": Case(SMTP_NOT_CONFIGURED, body={}),
    "GET /api/v1/alerts/settings": Case(),
    "GET /api/v1/audit": Case(),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(Path(tmp_path_factory.mktemp("access")) / "data").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def world(server: ServerProcess) -> Iterator[World]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        world = World(server, http)
        yield world
        world.meta.close()


def routes(server: ServerProcess) -> set[str]:
    """The OpenAPI document's operations, the WebSocket routes and the event streams (routes left out
    of the document), as RULES names them."""
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    found = {f"{m.upper()} {p}" for p, ops in paths.items() for m in ops}
    hidden = {f"{m} {r.path}" for router in routers for r in router.routes
              if isinstance(r, APIRoute) and not r.include_in_schema for m in r.methods}
    return found | hidden | {f"WEBSOCKET {r.path}" for router in routers for r in router.routes
                             if isinstance(r, APIWebSocketRoute)}


def test_every_route_has_a_case_and_a_rule(server: ServerProcess) -> None:
    assert routes(server) == set(CASES)
    assert set(RULES) == set(CASES)


def test_a_route_without_a_rule_is_not_mounted() -> None:
    with pytest.raises(RouteWithoutRule):
        rule("GET", "/api/v1/queues/{name}/secrets")
    router = routers[0]
    router.add_api_route("/api/v1/unruled", lambda: None, methods=["GET"])
    try:
        with tempfile.TemporaryDirectory() as tmp, pytest.raises(RouteWithoutRule):
            create_app(Settings(data_dir=Path(tmp), auth="on"))
    finally:
        router.routes.pop()


class World:
    """The objects every case addresses, made again before each authorised call (some delete them)."""

    def __init__(self, server: ServerProcess, http: httpx.Client) -> None:
        self.server = server
        self.http = http
        self.meta = MetaStore(Settings(data_dir=server.data_dir).meta_url)
        self.admin = (server.data_dir / "admin-token").read_text().strip()
        self.count = 0

    def auth(self, token: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"} if token else {}

    def token(self, **permissions: str) -> str:
        self.count += 1
        patterns = {action: f"^{name}$" for action, name in permissions.items()}
        return self.meta.create_token(f"tok{self.count}", **patterns)[1]

    def make(self) -> dict[str, str]:
        h = self.auth(self.admin)
        for path, body in ((f"/api/v1/queues/{Q}", {}), (f"/api/v1/exchanges/{X}", {"type": "fanout"}),
                           (f"/api/v1/queues/{Q}/groups/{G}", {})):
            assert self.http.put(path, json=body, headers=h).status_code in (200, 201)
        binding = self.http.post("/api/v1/bindings", json={"exchange": X, "queue": Q}, headers=h).json()
        published = self.http.post(f"/api/v1/queues/{Q}/publish", json=MESSAGE, headers=h).json()
        rules = self.http.get("/api/v1/alerts/rules", headers=h).json()
        if not rules:
            rules = [self.http.post("/api/v1/alerts/rules", headers=h,
                                    json={"kind": "lag_messages", "queue": Q, "threshold": 1}).json()]
        return {"binding_id": str(binding["id"]), "message_id": published["results"][0]["id"],
                "rule_id": str(rules[0]["id"])}

    def call(self, key: str, case: Case, token: str | None) -> tuple[int, str]:
        """(status, everything the caller received) of one call; a WebSocket's status is its close
        code minus 4000, or 200 when it opens and answers a ping."""
        method, template = key.split(" ", 1)
        path = template.format(**{**self.make(), **PARAMS, **case.params})
        if method == "WEBSOCKET":
            url = f"ws://127.0.0.1:{self.server.port}{path}"
            with connect(url, additional_headers=self.auth(token), open_timeout=10) as ws:
                try:
                    frame = ws.recv(0.5)  # a refusal: its error frame, then the close
                except TimeoutError:  # open: it answers
                    ws.send(b'{"type":"ping"}')
                    return 200, str(ws.recv(10))
                try:
                    ws.recv(10)
                except ConnectionClosed as closed:
                    assert closed.rcvd is not None
                    return closed.rcvd.code - 4000, str(frame) + closed.rcvd.reason
                raise AssertionError(f"{key}: {frame!r}")
        if path.endswith("/events"):  # a stream that never ends: its status and its first bytes
            with self.http.stream(method, path, headers=self.auth(token)) as streamed:
                text = next(streamed.iter_text()) if streamed.is_success else streamed.read().decode()
                return streamed.status_code, text
        response = self.http.request(method, path, params=case.query, headers=self.auth(token),
                                     json=case.body if case.body is not None or method in ("PUT", "POST") else None)
        return response.status_code, response.text


def exact_permissions(key: str, need: Need, case: Case) -> dict[str, str] | None:
    """The one permission on the one object a token needs: None when only an admin token will do."""
    if case.exact is not None:
        return case.exact
    if need.who != "resource":
        return {} if need.who != "admin" else None
    name = {**PARAMS, **case.params}[need.param]
    return {"read" if need.permission == "see" else need.permission: name}


@pytest.mark.parametrize("key", sorted(CASES))
def test_route_answers_each_credential(world: World, key: str) -> None:
    case, need = CASES[key], RULES[key]
    # metrics: CHUNKMQ_METRICS_REQUIRE_TOKEN is off here, and /metrics names every queue (for Prometheus)
    open_route = need.who in ("anyone", "metrics")
    stranger = world.token(configure="other", write="other", read="other")
    for who, token in (("no token", None), ("a wrong token", "cmq_wrong"), ("a stranger", stranger)):
        status, text = world.call(key, case, token)
        if open_route:
            expected = case.ok
        elif token != stranger:
            expected = 401
        elif need.who == "token":
            expected = case.stranger or case.ok
        else:
            expected = case.stranger or 403
        assert status == expected, f"{key} with {who}: {status} {text}"
        if not open_route and not key.startswith("GET /api/v1/alerts"):  # broker-wide: rules name queues
            assert not any(name in text for name in NAMES), f"{key} with {who} reads a name back: {text}"
    exact = exact_permissions(key, need, case)
    if exact is not None:
        status, text = world.call(key, case, world.token(**exact))
        assert status == case.ok, f"{key} with exactly {exact}: {status} {text}"
    status, text = world.call(key, case, world.admin)
    assert status == case.ok, f"{key} with the admin token: {status} {text}"


@pytest.mark.parametrize("permission", ["configure", "write", "read"])
def test_any_permission_on_an_object_shows_it_as_its_list_does(world: World, permission: str) -> None:
    http = world.http
    world.make()
    headers = world.auth(world.token(**{permission: Q}))
    assert http.get(f"/api/v1/queues/{Q}", headers=headers).status_code == 200
    assert Q in {q["name"] for q in http.get("/api/v1/queues", headers=headers).json()}
    assert http.get(f"/api/v1/queues/{Q}/groups/{G}", headers=headers).status_code == 200
    assert http.get(f"/api/v1/exchanges/{X}", headers=headers).status_code == 403


def test_a_403_does_not_say_whether_the_object_exists(world: World) -> None:
    http = world.http
    world.make()
    headers = world.auth(world.token(read="other"))
    there = http.get(f"/api/v1/queues/{Q}", headers=headers)
    absent = http.get("/api/v1/queues/no-such-queue", headers=headers)
    assert (there.status_code, there.json()) == (absent.status_code, absent.json()) == (403, {"error": {
        "code": "forbidden", "message": f"the token 'tok{world.count}' may not see this queue"}})
    assert http.get("/api/v1/queues/other", headers=headers).json()["error"]["code"] == "queue_not_found"
