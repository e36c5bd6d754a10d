"""What the conformance suite (tests/http/test_conformance_*.py) sends and how it compares answers.

Every hot route (app/api/hot_routes.py: a publish through an exchange, a publish to a queue, a pull)
is asked each case twice, by the same client in the same way: once as a hot request, which
`chunkmq serve`'s protocol answers from the parser's callbacks (app/http/protocol.py), and once with
one letter of its path percent-escaped (`/api/v1/%71ueues/...`), which the hot path declines
(HotRoutes.route_raw) and uvicorn's own path sends to the app through ASGI. Both answers must be the
same: status, headers (but the date) and body (message ids, offsets and timestamps aside).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.server import ServerProcess

#: The headers left out of the comparison: the date changes by the second, and content-length with
#: the blanked fields' digits (checked against each body instead). Every other header must match.
UNCOMPARED = frozenset({"date", "content-length"})
#: What differs between two messages published alike
VARYING = frozenset({"id", "offset", "timestamp"})


def asgi(path: str) -> str:
    """The same route's path as the hot path declines it: one letter percent-escaped."""
    for word, escaped in (("/api/v1/queues/", "/api/v1/%71ueues/"), ("/api/v1/exchanges/", "/api/v1/%65xchanges/")):
        if path.startswith(word):
            return escaped + path.removeprefix(word)
    raise ValueError(f"not a hot route: {path}")


def _blanked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "*" if k in VARYING else _blanked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blanked(v) for v in value]
    return value


def comparable(status: int, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, str], Any]:
    """An answer as the comparison sees it; its content-length checked here, as it differs with the
    blanked fields' digits."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "content-length" in lowered:
        assert int(lowered["content-length"]) == len(body), (lowered, body)
    try:
        parsed: Any = _blanked(json.loads(body))
    except ValueError:
        parsed = body
    return status, {k: v for k, v in lowered.items() if k not in UNCOMPARED}, parsed


@dataclass(frozen=True)
class Case:
    """One request of the suite: the hot route's path (in which `{q}` is the client's queue and `{g}`
    a group: `h` for the hot request, `a` for the ASGI one, so both pulls find the same messages),
    its body, whether it carries the token, and the status both must answer."""

    name: str
    path: str
    body: bytes
    token: bool
    status: int

    def paths(self, queue: str) -> tuple[str, str]:
        """The hot request's path and the ASGI one's."""
        return self.path.format(q=queue, g="h"), asgi(self.path.format(q=queue, g="a"))


def _publish(body: str) -> bytes:
    return json.dumps({"messages": [{"body": body}]}).encode()


#: Run in this order per client: the publishes come before the pulls that find them.
CASES = (
    Case("publish", "/api/v1/queues/{q}/publish", _publish("hello"), True, 200),
    Case("exchange publish", "/api/v1/exchanges/amq.default/publish",
         b'{"messages":[{"routing_key":"%q","body":"routed"}]}', True, 200),
    Case("pull", "/api/v1/queues/{q}/groups/{g}/pull", b'{"max_messages":10}', True, 200),
    Case("empty pull", "/api/v1/queues/{q}/groups/{g}/pull", b'{"max_messages":10}', True, 200),
    Case("no token", "/api/v1/queues/{q}/publish", _publish("x"), False, 401),
    Case("unknown field", "/api/v1/queues/{q}/publish", b'{"messages":[{"bdy":"x"}]}', True, 400),
    Case("bad ttl", "/api/v1/queues/{q}/publish", b'{"messages":[{"body":"x","ttl_ms":0}]}', True, 400),
    Case("not json", "/api/v1/queues/{q}/groups/{g}/pull", b'{"max_messages":', True, 400),
    Case("unknown queue", "/api/v1/queues/{q}-nope/publish", _publish("x"), True, 404),
)


def case_body(case: Case, queue: str) -> bytes:
    return case.body.replace(b"%q", queue.encode())


@dataclass
class Broker:
    """A real `chunkmq serve` with auth on and its first admin token."""

    server: ServerProcess
    token: str

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def queue(self, name: str) -> str:
        """A new queue named `name`, on the default exchange."""
        answer = httpx.put(f"{self.url}/api/v1/queues/{name}", headers=self.auth, timeout=10)
        assert answer.status_code == 201, answer.text
        return name


def broker(data_dir: Path, **env: str) -> Iterator[Broker]:
    """A module's broker (a generator for a module-scoped fixture)."""
    server = ServerProcess(data_dir, **env).start()
    try:
        yield Broker(server, (data_dir / "admin-token").read_text().strip())
    finally:
        server.stop()
    assert "Invalid HTTP request" not in server.log()


Sent = tuple[int, dict[str, str], Any]


def compare_cases(broker: Broker, queue: str, send: Any) -> list[tuple[Case, Sent, Sent]]:
    """Each case of CASES through `send(path, body, headers) -> comparable(...)`, hot then ASGI:
    each answered its status, both alike. Returns them for what a client checks besides."""
    out = []
    for case in CASES:
        hot_path, asgi_path = case.paths(queue)
        body = case_body(case, queue)
        headers = {**(broker.auth if case.token else {}), "content-type": "application/json"}
        hot, through = send(hot_path, body, headers), send(asgi_path, body, headers)
        assert hot[0] == case.status, (case.name, hot)
        assert hot == through, case.name
        out.append((case, hot, through))
    return out
