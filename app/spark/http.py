"""The few calls of chunkmq's public HTTP API that the Spark source and sink make.

Every call is synchronous and short-lived: Spark pickles the source to its executors, so a client is
opened where it is used (one per task), never carried in the source's state.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
import orjson

from chunkmq.spark.errors import ChunkmqError

ARROW_PAGE = 10_000  # the browse endpoint's largest page


def _q(name: str) -> str:
    return quote(name, safe="")


def _error(status: int, content: bytes) -> ChunkmqError:
    """The API's error shape `{"error": {"code", "message"}}` as an exception (any other body too)."""
    try:
        error = orjson.loads(content)["error"]
        code, message = error["code"], error["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        code, message = "http_error", content[:200].decode(errors="replace")
    return ChunkmqError(status, code, message)


class Api:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            raise _error(response.status_code, response.content)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return orjson.loads(self._check(self.client.get(path, params=params)).content)

    def post(self, path: str, body: Any) -> Any:
        response = self.client.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"})
        return orjson.loads(self._check(response).content)

    def queues(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/queues"))

    def queue(self, name: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/queues/{_q(name)}"))

    def offset_for_timestamp(self, name: str, timestamp_ms: int) -> int:
        """The first offset whose message is at or after the timestamp (the end if none is)."""
        page = self.get(f"/api/v1/queues/{_q(name)}/messages", timestamp=timestamp_ms, limit=1)
        return int(page["messages"][0]["offset"]) if page["messages"] else int(page["next_offset"])

    def publish(self, exchange: str, body: bytes) -> dict[str, Any]:
        """Publish a pre-rendered request body (`{"messages": [...]}`) to an exchange."""
        response = self.client.post(f"/api/v1/exchanges/{_q(exchange or 'amq.default')}/publish", content=body,
                                    headers={"content-type": "application/json"})
        return dict(orjson.loads(self._check(response).content))

    def move_group(self, queue: str, group: str, offset: int) -> None:
        """Declare the group if needed and seek it to ``offset`` (the job's progress, for the console)."""
        path = f"/api/v1/queues/{_q(queue)}/groups/{_q(group)}"
        self._check(self.client.put(path, content=b"{}", headers={"content-type": "application/json"}))
        self.post(f"{path}/seek", {"offset": offset})


class Pages:
    """Arrow pages (`GET .../messages?format=arrow`) over one keep-alive http.client connection.

    A page of 10,000 messages is about 1.7 MB: httpx (h11) spends about 7 ms of CPU receiving it,
    copying its 64 KB pieces into buffers, http.client about 1 ms (one read of Content-Length
    bytes). The pages are most of a read task's work, so they take the short road."""

    def __init__(self, url: str, token: str | None, timeout: float = 60.0) -> None:
        parts = urlsplit(url.rstrip("/"))
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        self.prefix = parts.path
        self.headers = {"authorization": f"Bearer {token}"} if token else {}

    def arrow_page(self, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        """An Arrow IPC stream of up to ``limit`` messages from ``offset``, and the next offset."""
        query = urlencode({"offset": offset, "limit": limit, "format": "arrow"})
        path = f"{self.prefix}/api/v1/queues/{_q(name)}/messages?{query}"
        for attempt in (1, 2):
            try:
                self.conn.request("GET", path, headers=self.headers)
                response = self.conn.getresponse()
                content = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # the server closed the idle keep-alive connection: a GET is safe to send again
                self.conn.close()
                if attempt == 2:
                    raise
        if response.status >= 400:
            raise _error(response.status, content)
        return content, int(response.headers["x-next-offset"])

    def close(self) -> None:
        self.conn.close()


@contextmanager
def connect(url: str, token: str | None, timeout: float = 60.0) -> Iterator[Api]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client:
        yield Api(client)
