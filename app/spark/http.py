"""The few calls of chunkmq's public HTTP API that the Spark source and sink make.

Every call is synchronous and short-lived: Spark pickles the source to its executors, so a client is
opened where it is used (one per task), never carried in the source's state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import orjson

ARROW_PAGE = 10_000  # the browse endpoint's largest page


class ChunkmqError(RuntimeError):
    """An error answer of the broker, with its API code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"chunkmq answered {status} {code}: {message}")
        self.status = status
        self.code = code


def _q(name: str) -> str:
    return quote(name, safe="")


class Api:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            try:
                error = orjson.loads(response.content)["error"]
                code, message = error["code"], error["message"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                code, message = "http_error", response.text[:200]
            raise ChunkmqError(response.status_code, code, message)
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

    def arrow_page(self, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        """An Arrow IPC stream of up to ``limit`` messages from ``offset``, and the next offset."""
        response = self._check(self.client.get(
            f"/api/v1/queues/{_q(name)}/messages", params={"offset": offset, "limit": limit, "format": "arrow"}))
        return response.content, int(response.headers["x-next-offset"])

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


@contextmanager
def connect(url: str, token: str | None, timeout: float = 60.0) -> Iterator[Api]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client:
        yield Api(client)
