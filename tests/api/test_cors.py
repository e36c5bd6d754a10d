"""CORS for /api/v1 (CHUNKMQ_CORS_ORIGINS, app/api/cors.py): in process over ASGI, and against a
real `chunkmq serve` with curl, whose hot routes answer from the HTTP protocol itself."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from chunkmq.config import Settings
from chunkmq.main import create_app
from tests.server import ServerProcess

pytestmark = pytest.mark.anyio

PAGE = "http://127.0.0.1:5173"
OTHER = "http://evil.example"
PREFLIGHT = {"origin": PAGE, "access-control-request-method": "POST",
             "access-control-request-headers": "authorization, content-type, idempotency-key"}
PUBLISH = "/queues/orders/publish"
BODY = {"messages": [{"body": "hi"}]}


async def _client(tmp_path: Path, **settings: object) -> AsyncIterator[httpx.AsyncClient]:
    options = Settings(data_dir=tmp_path / "data", chunk_size=1 << 20, index_chunk_entries=1000, **settings)
    application = create_app(options)
    async with application.router.lifespan_context(application):
        token_file = options.data_dir / "admin-token"
        auth = {"authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.exists() else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://local/api/v1",
                                     headers=auth) as client:
            client.app = application  # type: ignore[attr-defined]
            yield client


@pytest.fixture
async def cors_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(tmp_path / "cors", cors_origins=f" {PAGE}/ , http://other.example"):
        yield client


@pytest.fixture
async def plain_api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(tmp_path / "plain"):
        yield client


def test_setting_is_a_set_of_origins() -> None:
    assert Settings(cors_origins="").cors_allowed == frozenset()
    assert Settings(cors_origins="https://a.example/, ,http://b:81").cors_allowed == {"https://a.example", "http://b:81"}


async def test_preflight_from_a_listed_origin(cors_api: httpx.AsyncClient) -> None:
    for path in (PUBLISH, "/queues/orders", "/queues/orders/groups/g/events"):
        response = await cors_api.options(path, headers=PREFLIGHT)
        assert response.status_code == 200, response.text
        assert response.headers["access-control-allow-origin"] == PAGE
        assert "POST" in response.headers["access-control-allow-methods"]
        allowed = response.headers["access-control-allow-headers"].lower()
        for name in ("authorization", "content-type", "idempotency-key", "last-event-id"):
            assert name in allowed
        assert int(response.headers["access-control-max-age"]) > 0
        assert "access-control-allow-credentials" not in response.headers  # bearer tokens only
        assert "Origin" in response.headers["vary"]


async def test_preflight_from_an_unlisted_origin_gets_no_cors_headers(cors_api: httpx.AsyncClient) -> None:
    response = await cors_api.options(PUBLISH, headers={**PREFLIGHT, "origin": OTHER})
    assert response.status_code == 204
    assert "POST" in response.headers["allow"]
    assert not [h for h in response.headers if h.startswith("access-control-")]


async def test_answers_to_a_listed_origin_carry_the_headers(cors_api: httpx.AsyncClient) -> None:
    page = {"origin": PAGE}
    assert (await cors_api.put("/queues/orders", json={}, headers=page)).status_code in (200, 201)
    for response in (
        await cors_api.post(PUBLISH, json=BODY, headers=page),  # a hot route, through the stack
        await cors_api.post("/queues/orders/groups/g/pull", json={"max_messages": 1}, headers=page),
        await cors_api.get("/queues/orders", headers=page),
        await cors_api.post(PUBLISH, json={"messages": "x"}, headers=page),  # errors too
        await cors_api.get("/queues/nope", headers=page),
        await cors_api.get("/queues", headers={**page, "authorization": "Bearer wrong"}),
    ):
        assert response.headers["access-control-allow-origin"] == PAGE, response.request.url
        assert "Origin" in response.headers["vary"]
        assert "link" in response.headers["access-control-expose-headers"]
    assert [r.status_code for r in (
        await cors_api.post(PUBLISH, json={"messages": "x"}, headers=page),
        await cors_api.get("/queues", headers={**page, "authorization": "Bearer wrong"}),
    )] == [400, 401]


async def test_no_allow_origin_for_others_or_the_console(cors_api: httpx.AsyncClient) -> None:
    await cors_api.put("/queues/orders", json={})
    for response in (
        await cors_api.post(PUBLISH, json=BODY),  # no Origin: the hot path, as without CORS
        await cors_api.post(PUBLISH, json=BODY, headers={"origin": OTHER}),
        await cors_api.get("http://local/login", headers={"origin": PAGE}),
        await cors_api.options("http://local/login", headers=PREFLIGHT),
    ):
        assert "access-control-allow-origin" not in response.headers, response.request.url
    assert (await cors_api.post(PUBLISH, json=BODY, headers={"origin": OTHER})).status_code == 200


async def test_hot_routes_decline_origin_requests_only_with_cors(cors_api: httpx.AsyncClient) -> None:
    from chunkmq.api import pull
    from chunkmq.api.hot_routes import HotRoutes

    hot = cors_api.app.hot_routes  # type: ignore[attr-defined]
    scope = {"type": "http", "method": "POST", "path": "/api/v1/queues/q/groups/g/pull", "root_path": "",
             "headers": [(b"origin", PAGE.encode())]}
    assert hot.cross_origin and hot.match(dict(scope)) is None
    assert hot.match({**scope, "headers": []}) is not None
    assert HotRoutes([], [pull.route]).match(dict(scope)) is not None  # without CORS: hot, Origin or not


async def test_without_the_setting_nothing_changes(plain_api: httpx.AsyncClient) -> None:
    await plain_api.put("/queues/orders", json={})
    response = await plain_api.options(PUBLISH, headers=PREFLIGHT)
    assert response.status_code == 204
    answer = await plain_api.post(PUBLISH, json=BODY, headers={"origin": PAGE})
    assert answer.status_code == 200
    assert not [h for h in (*response.headers, *answer.headers) if h.startswith("access-control-")]


async def test_auth_off_lets_listed_origins_change_the_broker(tmp_path: Path) -> None:
    async for client in _client(tmp_path, auth="off", cors_origins=PAGE):
        local = {"host": "127.0.0.1:8000"}
        ok = await client.put("/queues/q", json={}, headers={**local, "origin": PAGE})
        assert ok.status_code in (200, 201) and ok.headers["access-control-allow-origin"] == PAGE
        refused = await client.put("/queues/q", json={}, headers={**local, "origin": OTHER})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "cross_origin"
        assert "access-control-allow-origin" not in refused.headers


# --- a real server, with curl ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def cors_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = Path(tmp_path_factory.mktemp("cors")) / "data"
    proc = ServerProcess(data, CHUNKMQ_CORS_ORIGINS=PAGE, CHUNKMQ_CHUNK_SIZE="1048576").start()
    yield proc
    proc.stop()


def _curl(*args: str) -> tuple[int, dict[str, str], str]:
    """Status, headers (lower-case names) and body of one curl request."""
    out = subprocess.run(["curl", "-sS", "-i", "--max-time", "10", *args], capture_output=True, check=True).stdout
    head, _, body = out.decode().partition("\r\n\r\n")
    status_line, *lines = head.split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("path", ["/api/v1/queues/orders/publish", "/api/v1/queues/orders"])
def test_real_server_with_curl(cors_server: ServerProcess, path: str) -> None:
    token = (cors_server.data_dir / "admin-token").read_text().strip()
    auth = f"authorization: Bearer {token}"
    status, _, body = _curl("-X", "PUT", "-H", auth, "-H", "content-type: application/json", "--data", "{}",
                            f"{cors_server.url}/api/v1/queues/orders")
    assert status in (200, 201), body
    status, headers, _ = _curl("-X", "OPTIONS", "-H", f"origin: {PAGE}", "-H", "access-control-request-method: POST",
                               "-H", "access-control-request-headers: authorization,content-type",
                               f"{cors_server.url}{path}")
    assert status == 200 and headers["access-control-allow-origin"] == PAGE
    assert "authorization" in headers["access-control-allow-headers"].lower()
    # the hot route (publish) is answered by the stack once a page asks, the other one always
    args = ["-X", "POST", "--data", '{"messages": [{"body": "hi"}]}'] if path.endswith("/publish") else []
    for extra, expect in ((["-H", f"origin: {PAGE}"], PAGE), ([], None), (["-H", f"origin: {OTHER}"], None)):
        status, headers, body = _curl(*args, "-H", auth, "-H", "content-type: application/json", *extra,
                                      f"{cors_server.url}{path}")
        assert status == 200, body
        assert headers.get("access-control-allow-origin") == expect
        if expect:
            assert "Origin" in headers["vary"]
    # an error from the hot route, to a page: the headers too
    status, headers, body = _curl("-X", "POST", "-H", "authorization: Bearer nope", "-H", f"origin: {PAGE}",
                                  "-H", "content-type: application/json", "--data", "{}",
                                  f"{cors_server.url}/api/v1/queues/orders/publish")
    assert status == 401 and headers["access-control-allow-origin"] == PAGE, body
