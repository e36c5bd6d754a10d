"""The hot routes (app/api/hot_routes.py): a publish or pull served ahead of the middleware stack is
answered exactly as the stack answers it, byte for byte, for every kind of refusal, server error and
token, and with the same shape on success; any other request goes through the stack."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
from fastapi import FastAPI
from starlette.routing import Route, compile_path
from starlette.types import Receive, Scope, Send

from chunkmq.api import publish, pull
from chunkmq.api.guard import Guard, every_request
from chunkmq.config import Settings
from chunkmq.main import App, create_app
from chunkmq.wire.batch import MEDIA_TYPE as BATCH_MEDIA_TYPE

JSON = {"content-type": "application/json"}
PUBLISH = orjson.dumps({"messages": [{"body": "hello"}]})

# (method, path, body, headers): each is sent twice, once to the app and once to its stack alone.
REFUSALS: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("POST", "/api/v1/queues/nowhere/publish", PUBLISH, JSON),
    ("POST", "/api/v1/queues/q/publish", b"{not json", JSON),
    ("POST", "/api/v1/queues/q/publish", b'{"messages": [], "extra": 1}', JSON),
    ("POST", "/api/v1/queues/q/publish", b'{"messages": [{"body": 5}]}', JSON),
    ("POST", "/api/v1/queues/a%20b/publish", PUBLISH, JSON),
    ("POST", "/api/v1/queues/q/publish?mandatory=maybe", b"", {"content-type": BATCH_MEDIA_TYPE}),
    ("POST", "/api/v1/queues/q/publish", b"\x01\x02", {"content-type": BATCH_MEDIA_TYPE}),
    ("POST", "/api/v1/exchanges/nowhere/publish", PUBLISH, JSON),
    ("POST", "/api/v1/queues/q/groups/a%20b/pull", b"{}", JSON),
    ("POST", "/api/v1/queues/q/groups/g/pull", b'{"max_messages": 0}', JSON),
    ("POST", "/api/v1/queues/q/groups/g/pull", b'{"ack": {"up_to": "x"}}', JSON),
    ("POST", "/api/v1/queues/q/groups/g/pull", b"[]", JSON),
    ("POST", "/api/v1/queues/nowhere/groups/g/pull", b"{}", JSON),
]
LOCAL_REFUSALS: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("POST", "/api/v1/queues/q/publish", PUBLISH, {**JSON, "origin": "http://evil.example"}),
    ("POST", "/api/v1/queues/q/publish", PUBLISH, {**JSON, "host": "evil.example"}),
    ("POST", "/api/v1/queues/q/publish", PUBLISH, {"content-type": "text/plain"}),
    ("POST", "/api/v1/queues/q/groups/g/pull", b"{}", {**JSON, "origin": "null"}),
]


def _stack(app: FastAPI) -> Any:
    async def stack(scope: Scope, receive: Receive, send: Send) -> None:
        await FastAPI.__call__(app, scope, receive, send)  # the middleware stack and router, no hot routes

    return stack


def _answers(settings: Settings, requests: list[tuple[str, str, bytes, dict[str, str]]],
             token: str | None = None) -> list[tuple[httpx.Response, httpx.Response]]:
    async def main() -> list[tuple[httpx.Response, httpx.Response]]:
        app = create_app(settings)
        assert isinstance(app, App)
        async with app.router.lifespan_context(app):
            auth = {"authorization": f"Bearer {_admin_token(settings)}"} if settings.auth == "on" else {}
            hot, stack = _clients(app)
            async with hot, stack:
                assert (await hot.put("/api/v1/queues/q", json={}, headers=auth)).status_code == 201
                assert (await hot.put("/api/v1/queues/q/groups/g", json={}, headers=auth)).status_code == 201
                pairs = []
                for method, path, body, headers in requests:
                    sent = {**(auth if token is None else {"authorization": f"Bearer {token}"}), **headers}
                    scope = {"type": "http", "method": method, "path": httpx.URL(path).path, "root_path": ""}
                    assert app.hot_routes.match(scope) is not None, path  # the request takes the hot route
                    pairs.append((await hot.request(method, path, content=body, headers=sent),
                                  await stack.request(method, path, content=body, headers=sent)))
                return pairs

    return asyncio.run(main())


def _clients(app: App) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
    """Clients of the app and of its stack alone; a 500 is an answer here, as a server sends it."""
    return tuple(httpx.AsyncClient(transport=httpx.ASGITransport(app=a, raise_app_exceptions=False),  # type: ignore[return-value]
                                   base_url="http://127.0.0.1") for a in (app, _stack(app)))


def _admin_token(settings: Settings) -> str:
    return (settings.data_dir / "admin-token").read_text().strip()


def _same(pairs: list[tuple[httpx.Response, httpx.Response]]) -> None:
    for hot, stack in pairs:
        assert hot.status_code == stack.status_code, (hot.request.url, hot.text, stack.text)
        assert hot.content == stack.content, (hot.request.url, hot.text, stack.text)
        assert hot.headers == stack.headers, hot.request.url
        assert hot.status_code >= 400, hot.request.url
        assert set(orjson.loads(hot.content)["error"]) == {"code", "message"}, hot.request.url


def test_refusals_are_answered_as_the_stack_answers_them(tmp_path: Path) -> None:
    settings = Settings(auth="off", data_dir=tmp_path / "data")
    pairs = _answers(settings, REFUSALS + LOCAL_REFUSALS)
    _same(pairs)
    codes = [orjson.loads(hot.content)["error"]["code"] for hot, _ in pairs]
    assert codes == [
        "queue_not_found", "invalid_body", "invalid_body", "invalid_body", "invalid_name", "invalid_request",
        "invalid_body", "exchange_not_found", "invalid_name", "invalid_body", "invalid_body", "invalid_body",
        "queue_not_found", "cross_origin", "invalid_host", "unsupported_media_type", "cross_origin",
    ]


def test_tokens_are_checked_on_the_hot_routes(tmp_path: Path) -> None:
    settings = Settings(auth="on", data_dir=tmp_path / "data")
    pairs = _answers(settings, [("POST", "/api/v1/queues/q/publish", PUBLISH, JSON),
                                ("POST", "/api/v1/queues/q/groups/g/pull", b"{}", JSON)], token="cmq_wrong")
    _same(pairs)
    assert [hot.status_code for hot, _ in pairs] == [401, 401]
    assert pairs[0][0].headers["www-authenticate"] == "Bearer"


def test_a_publish_and_its_pull_succeed_with_the_stack_s_answer_shape(tmp_path: Path) -> None:
    async def main() -> None:
        app = create_app(Settings(auth="off", data_dir=tmp_path / "data"))
        async with app.router.lifespan_context(app):
            hot = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
            stack = httpx.AsyncClient(transport=httpx.ASGITransport(app=_stack(app)), base_url="http://127.0.0.1")
            async with hot, stack:
                await hot.put("/api/v1/queues/q", json={})
                await hot.put("/api/v1/queues/q/groups/g", json={})
                published = [await client.post("/api/v1/queues/q/publish", content=PUBLISH, headers=JSON)
                             for client in (hot, stack)]
                routed = [p.json()["results"][0]["routed"] for p in published]
                assert routed == [[{"queue": "q", "offset": n}] for n in (0, 1)]
                assert published[0].headers == published[1].headers
                pulled = await hot.post("/api/v1/queues/q/groups/g/pull", json={"max_messages": 10})
                assert [m["offset"] for m in pulled.json()["messages"]] == [0, 1]
                # other methods and paths take the stack: 405 with the route's Allow
                wrong = await hot.get("/api/v1/queues/q/publish")
                assert wrong.status_code == 405 and wrong.headers["allow"] == "OPTIONS, POST"

    asyncio.run(main())


def test_both_paths_apply_the_one_list_of_checks(tmp_path: Path) -> None:
    for auth in ("off", "on"):
        settings = Settings(auth=auth, data_dir=tmp_path / auth)
        app = create_app(settings)
        declared = [check.__qualname__ for check in every_request(settings)]
        assert [check.__qualname__ for check in app.hot_routes.checks] == declared
        guards = [m for m in app.user_middleware if m.cls is Guard]
        assert [[c.__qualname__ for c in m.kwargs["checks"]] for m in guards] == ([declared] if declared else [])
    assert declared == [] and [c.__qualname__ for c in every_request(Settings(auth="off"))] == ["LocalChecks.check"]


def test_server_errors_are_answered_as_the_stack_answers_them(tmp_path: Path) -> None:
    """A full disk budget (507) and an unexpected failure (500, its text kept out of the answer)."""
    async def main() -> list[tuple[httpx.Response, httpx.Response]]:
        app = create_app(Settings(auth="off", data_dir=tmp_path / "data", disk_budget_bytes=1))
        async with app.router.lifespan_context(app):
            hot, stack = _clients(app)
            async with hot, stack:
                await hot.put("/api/v1/queues/q", json={})
                await hot.put("/api/v1/queues/q/groups/g", json={})
                app.state.broker.disk.measure()
                pairs = [(await hot.post("/api/v1/queues/q/publish", content=PUBLISH, headers=JSON),
                          await stack.post("/api/v1/queues/q/publish", content=PUBLISH, headers=JSON))]

                def broken(*args: Any, **kwargs: Any) -> Any:
                    raise RuntimeError("driver says: secret connection string")

                async def broken_wait(*args: Any, **kwargs: Any) -> Any:
                    broken()

                app.state.broker.begin_publish, app.state.broker.pull = broken, broken_wait
                for path, body in (("/api/v1/queues/q/publish", PUBLISH), ("/api/v1/queues/q/groups/g/pull", b"{}")):
                    pairs.append((await hot.post(path, content=body, headers=JSON),
                                  await stack.post(path, content=body, headers=JSON)))
                return pairs

    pairs = asyncio.run(main())
    _same(pairs)
    assert [(hot.status_code, orjson.loads(hot.content)["error"]["code"]) for hot, _ in pairs] == [
        (507, "storage_full"), (500, "internal_error"), (500, "internal_error")]
    assert all(b"secret" not in hot.content for hot, _ in pairs)


# token -> (publish to q, publish through amq.default to q, pull q/g): the statuses both paths give
AUTH_MATRIX: dict[str, tuple[int, int, int]] = {
    "admin": (200, 200, 200),
    "writer": (200, 403, 403),  # write on queue q, not on the exchange amq.default
    "reader": (403, 403, 200),
    "configurer": (403, 403, 403),
    "other queue": (403, 403, 403),
    "wrong": (401, 401, 401),
    "none": (401, 401, 401),
}


def test_every_token_gets_the_stack_s_answer(tmp_path: Path) -> None:
    settings = Settings(auth="on", data_dir=tmp_path / "data")
    requests = [("/api/v1/queues/q/publish", PUBLISH),
                ("/api/v1/exchanges/amq.default/publish",
                 orjson.dumps({"messages": [{"body": "x", "routing_key": "q"}]})),
                ("/api/v1/queues/q/groups/g/pull", b"{}")]

    async def main() -> dict[str, list[tuple[httpx.Response, httpx.Response]]]:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            meta = app.state.auth.meta
            tokens: dict[str, str | None] = {
                "admin": _admin_token(settings),
                "writer": meta.create_token("w", write="^q$")[1],
                "reader": meta.create_token("r", read="^q$")[1],
                "configurer": meta.create_token("c", configure=".*")[1],
                "other queue": meta.create_token("o", write="^other$", read="^other$")[1],
                "wrong": "cmq_wrong",
                "none": None,
            }
            hot, stack = _clients(app)
            admin = {"authorization": f"Bearer {tokens['admin']}"}
            async with hot, stack:
                assert (await hot.put("/api/v1/queues/q", json={}, headers=admin)).status_code == 201
                assert (await hot.put("/api/v1/queues/q/groups/g", json={}, headers=admin)).status_code == 201
                answers = {}
                for who, token in tokens.items():
                    sent = {**JSON, **({"authorization": f"Bearer {token}"} if token else {})}
                    answers[who] = [(await hot.post(path, content=body, headers=sent),
                                     await stack.post(path, content=body, headers=sent)) for path, body in requests]
                return answers

    answers = asyncio.run(main())
    assert {who: tuple(hot.status_code for hot, _ in pairs) for who, pairs in answers.items()} == AUTH_MATRIX
    for pairs in answers.values():
        for hot, stack in pairs:
            assert hot.status_code == stack.status_code, hot.request.url
            if hot.status_code == 200:  # two publishes get two offsets, two pulls other messages: the same fields
                assert hot.headers.keys() == stack.headers.keys()
                assert hot.headers["content-type"] == stack.headers["content-type"]
                assert orjson.loads(hot.content).keys() == orjson.loads(stack.content).keys()
            else:
                _same([(hot, stack)])


def test_a_path_s_match_is_kept_and_its_parameters_are_the_caller_s(tmp_path: Path) -> None:
    """HotRoutes keeps each path's match (a bounded memo): the same route and parameters as the
    regexes give, a fresh parameters dict per request, and past the memo's size still every match."""
    hot = create_app(Settings(auth="off", data_dir=tmp_path / "data")).hot_routes
    first = hot.route("POST", "/api/v1/queues/q/publish")
    assert first is not None and first[1] == {"name": "q"}
    first[1]["name"] = "changed by a request"
    again = hot.route("POST", "/api/v1/queues/q/publish")
    assert again is not None and again[0] is first[0] and again[1] == {"name": "q"}
    assert hot.route("GET", "/api/v1/queues/q/publish") is None and hot.route("POST", "/api/v1/queues") is None
    for i in range(2500):  # the memo is emptied when full
        found = hot.route("POST", f"/api/v1/exchanges/x{i}/publish")
        assert found is not None and found[1] == {"name": f"x{i}"}
        assert hot.route("POST", f"/api/v1/queues/q{i}/groups/g/pull") is not None
        assert hot.route("POST", f"/api/v1/queues/q{i}/other") is None
    assert len(hot._seen) <= 1000


def test_a_hot_route_matches_as_starlette_s_router_and_is_in_the_app_s_router(tmp_path: Path) -> None:
    """A HotRoute compiles its path itself (a restart's first stage loads no Starlette routing): the
    regex Starlette's router compiles for it; the full app's router holds it as a Starlette route."""
    app = create_app(Settings(auth="off", data_dir=tmp_path / "data"))
    for route in [*publish.routes, pull.route]:
        assert route.path_regex.pattern == compile_path(route.path)[0].pattern
        routed = [r for r in app.router.routes if isinstance(r, Route) and r.path == route.path]
        assert len(routed) == 1 and routed[0].methods == {"POST"}, route.path
    assert pull.route.path_regex.match("/api/v1/queues/a.b/groups/g-1/pull") is not None
    assert pull.route.path_regex.match("/api/v1/queues/a/b/groups/g/pull") is None
