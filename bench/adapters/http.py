"""A keep-alive JSON-over-HTTP client for the HTTP adapters (chunkmq REST, RabbitMQ management).

The standard library's http.client, not httpx: measured on this machine, httpx spends about 0.4 ms
of client CPU per request (0.55 ms for a /healthz round trip whose server side takes 0.15 ms), which
made the HTTP workloads measure the client library instead of the server. http.client costs about a
third of that, and both HTTP adapters use it, so the comparison between servers stays fair.
"""

from __future__ import annotations

import base64
import http.client
from typing import Any

import orjson


class HttpJson:
    def __init__(self, port: int, prefix: str, *, user: str | None = None, password: str = "",
                 timeout: float = 60) -> None:
        self.port = port
        self.prefix = prefix
        self.timeout = timeout
        self.headers = {"content-type": "application/json"}
        if user is not None:
            self.headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def request(self, method: str, path: str, body: object | None = None, *, content: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, raw body); reconnects once if the server closed the kept-alive connection.
        `body` goes as JSON; `content` as it is, with `headers` over the JSON ones (a binary batch)."""
        if content is None and body is not None:
            content = orjson.dumps(body)
        sent = self.headers if headers is None else {**self.headers, **headers}
        for attempt in (1, 2):
            try:
                self.conn.request(method, self.prefix + path, body=content, headers=sent)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: object | None = None, *, who: str = "") -> Any:
        """The decoded answer; a 4xx/5xx raises (except a DELETE of something already gone)."""
        status, raw = self.request(method, path, body)
        if status >= 400 and not (method == "DELETE" and status == 404):
            raise RuntimeError(f"{who} {method} {path}: {status} {raw[:300]!r}")
        return orjson.loads(raw) if raw else None

    def close(self) -> None:
        self.conn.close()
