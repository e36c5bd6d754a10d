"""The conformance suite (tests/http/conformance.py) with curl and Node.js 20 against a real
`chunkmq serve` with auth on: every hot route answers each case as the ASGI path does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.conformance import CASES, Broker, Case, asgi, broker, case_body, comparable
from tests.http.raw import answers


@pytest.fixture(scope="module")
def chunkmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from broker(tmp_path_factory.mktemp("tools") / "data")


LARGE = Case("large publish", "/api/v1/queues/{q}/publish",
             json.dumps({"messages": [{"body": "x" * 300_000}]}).encode(), True, 200)

#: curl's options per variant, the same for every request of it
VARIANTS = {
    "keep-alive": [],
    "expect-100-continue": ["-H", "Expect: 100-continue", "--expect100-timeout", "5"],
    "chunked": ["-H", "Transfer-Encoding: chunked"],
    "http1.0": ["--http1.0"],
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_curl(chunkmq: Broker, tmp_path: Path, variant: str) -> None:
    """Every case, hot and through ASGI, in one curl run (`--next`: one connection kept alive, but
    with HTTP/1.0), with the variant's options; the expect variant with a body of 300 KB too."""
    queue = chunkmq.queue(f"curl-{variant}")
    cases = [*CASES, LARGE] if variant == "expect-100-continue" else list(CASES)
    args = ["curl", "-sS", "--fail-early"]
    outputs = []
    for n, case in enumerate(cases):
        body = tmp_path / f"{n}.json"
        body.write_bytes(case_body(case, queue))
        for m, path in enumerate(case.paths(queue)):
            out = tmp_path / f"{n}-{m}.out"
            outputs.append(out)
            args += ["--next", "-i", "-o", str(out), "-w", "%{num_connects}\n", "--data-binary", f"@{body}",
                     "-H", "content-type: application/json", *VARIANTS[variant], f"{chunkmq.url}{path}"]
            if case.token:
                args += ["-H", f"authorization: Bearer {chunkmq.token}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    connects = [int(n) for n in run.stdout.split()]
    for n, case in enumerate(cases):
        hot, through = (answers(outputs[2 * n + m].read_bytes()) for m in (0, 1))
        assert len(hot) == len(through) == 1, (case.name, hot, through)
        hot_seen, through_seen = (comparable(a[0].status, a[0].headers, a[0].body) for a in (hot, through))
        assert hot_seen[0] == case.status, (case.name, hot)
        assert hot_seen == through_seen, case.name
        if variant == "http1.0":
            assert hot_seen[1]["connection"] == "close"
    if variant == "http1.0":
        assert connects == [1] * len(connects)
        return
    # kept alive throughout, whichever path answered; but with Expect, a refusal before the body was
    # asked for (401: no token) leaves curl with a body it never sent, and it opens a new connection
    sent = [c.name for c in cases for _ in (0, 1)]
    reconnected_after = [sent[n - 1] for n, connected in enumerate(connects) if connected and n]
    assert connects[0] == 1
    assert reconnected_after == (["no token"] * 2 if variant == "expect-100-continue" else []), connects


NODE_SCRIPT = r"""
const [base, token, queue, casesJson] = process.argv.slice(2);
const json = {"content-type": "application/json", authorization: `Bearer ${token}`};
const post = (path, body) => fetch(base + path, {method: "POST", headers: json, body});

// A publish and a pull (both hot), then a consume stream on the same origin: undici's WebSocket
// takes the idle connection of fetch's pool, so its handshake follows the pull on it.
const published = await post(`/api/v1/queues/${queue}/publish`, '{"messages":[{"body":"from node"}]}');
const pulled = await post(`/api/v1/queues/${queue}/groups/other/pull`, '{"max_messages":1}');
const before = [published.status, await published.text(), pulled.status, await pulled.text()];
const frame = await new Promise((resolve, reject) => {
  const ws = new WebSocket(`${base.replace("http", "ws")}/api/v1/queues/${queue}/groups/ws/stream?token=${token}`);
  ws.onopen = () => ws.send(JSON.stringify({type: "credit", n: 1}));
  ws.onerror = (e) => reject(new Error(`websocket: ${e.message}`));
  ws.onmessage = async (e) => {
    resolve(JSON.parse(typeof e.data === "string" ? e.data : Buffer.from(await e.data.arrayBuffer()).toString()));
    ws.close();
  };
});

// every case, hot and through ASGI
const results = [];
for (const [path, body, withToken] of JSON.parse(casesJson)) {
  const headers = {"content-type": "application/json"};
  if (withToken) headers.authorization = `Bearer ${token}`;
  const r = await fetch(base + path, {method: "POST", headers, body});
  results.push([r.status, Object.fromEntries(r.headers), await r.text()]);
}
console.log(JSON.stringify({before, frame, results}));
"""


def test_node_fetch_and_websocket(chunkmq: Broker, tmp_path: Path) -> None:
    """Node's built-in fetch (undici) publishes and pulls, then its built-in WebSocket opens a consume
    stream on the same origin and receives the message (the handshake on the connection the pull
    used: answered 400 before app/http/protocol.py's fix, "Received network error or non-101 status
    code"); then fetch goes through every case, hot and through ASGI."""
    queue = chunkmq.queue("node")
    sent = []
    for case in CASES:
        for path in case.paths(queue):
            sent.append([path, case_body(case, queue).decode(), case.token])
    script = tmp_path / "client.mjs"
    script.write_text(NODE_SCRIPT)
    run = subprocess.run(["node", "--experimental-websocket", str(script), chunkmq.url, chunkmq.token, queue,
                          json.dumps(sent)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["before"][0] == out["before"][2] == 200, out["before"]
    assert out["frame"]["type"] == "messages" and out["frame"]["messages"][0]["body"] == "from node"
    seen = [comparable(status, headers, body.encode()) for status, headers, body in out["results"]]
    for n, case in enumerate(CASES):
        assert seen[2 * n][0] == case.status, (case.name, seen[2 * n])
        assert seen[2 * n] == seen[2 * n + 1], case.name


def test_the_escaped_path_is_the_same_route() -> None:
    """The comparison's premise: one letter escaped names the same route, and no other."""
    assert asgi("/api/v1/queues/q/publish") == "/api/v1/%71ueues/q/publish"
    assert asgi("/api/v1/exchanges/x/publish") == "/api/v1/%65xchanges/x/publish"
    with pytest.raises(ValueError):
        asgi("/api/v1/overview")
