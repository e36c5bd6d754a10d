"""GET /api/v1/queues/{q}/messages?format=arrow: an Arrow IPC stream with the next offset in a header."""

from __future__ import annotations

import httpx
import pyarrow as pa

from tests.api.client import error, ok, queue


def test_arrow_page(api: httpx.Client, name: str) -> None:
    queue(api, name)
    messages = [{"body": f"m{i}", "routing_key": "k", "tag": "t"} for i in range(30)] + [{"body_base64": "AAE="}]
    ok(api.post(f"/api/v1/queues/{name}/publish", json={"messages": messages}))
    r = api.get(f"/api/v1/queues/{name}/messages", params={"offset": 10, "limit": 25, "format": "arrow"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.arrow.stream"
    assert r.headers["x-next-offset"] == "31"
    table = pa.ipc.open_stream(r.content).read_all()
    assert table.column_names == ["queue", "offset", "id", "timestamp", "exchange", "routing_key", "tag", "headers",
                                  "body"]
    assert table.column("offset").to_pylist() == list(range(10, 31))
    assert table.column("body").to_pylist()[:2] == [b"m10", b"m11"] and table.column("body")[-1].as_py() == b"\x00\x01"
    as_json = ok(api.get(f"/api/v1/queues/{name}/messages", params={"offset": 10, "limit": 1}))["messages"][0]
    assert table.column("id")[0].as_py() == as_json["id"]
    assert int(table.column("timestamp")[0].value) == as_json["timestamp"] * 1000
    # past the end: an empty stream, the same next offset
    r = api.get(f"/api/v1/queues/{name}/messages", params={"offset": 31, "format": "arrow"})
    assert pa.ipc.open_stream(r.content).read_all().num_rows == 0 and r.headers["x-next-offset"] == "31"


def test_arrow_errors(api: httpx.Client, name: str) -> None:
    error(api.get(f"/api/v1/queues/{name}/messages", params={"format": "arrow"}), 404, "queue_not_found")
    queue(api, name)
    r = api.get(f"/api/v1/queues/{name}/messages", params={"format": "parquet"})
    assert r.status_code == 400 and r.json()["error"]["message"]
