"""The server `chunkmq serve` runs: uvicorn's Config and Server, with chunkmq's HTTP and WebSocket
protocols (app/http/protocol.py, app/http/websocket.py) and the options it runs them with."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from chunkmq.http.access_log import HotAccessLog
from chunkmq.http.protocol import http_protocol
from chunkmq.http.websocket import websocket_protocol_on_upgrade

if TYPE_CHECKING:
    import uvicorn

    from chunkmq.config import Settings


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The server stack `chunkmq serve` runs the app on: uvicorn's arguments (the W8 benchmark's bare
    ASGI floor runs on exactly these too, bench/floor.py)."""
    return dict(
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=http_protocol(settings.request_header_timeout_seconds,
                           HotAccessLog.of(settings.access_log, settings.access_log_slow_seconds)),
        # Past this many open connections (WebSockets included) a new request is answered 503.
        limit_concurrency=settings.max_connections,
        ws=websocket_protocol_on_upgrade(),
        # A publish-stream frame may carry a whole batch; uvicorn's default would cap it at 16 MiB.
        ws_max_size=settings.max_batch_bytes + 1024 * 1024,
        # No permessage-deflate: its zlib state costs about 35 KB per connection, most of an idle
        # consumer's memory (docs/scaling.md), and CPU on every frame; clients offering it get plain frames.
        ws_per_message_deflate=False,
        ws_ping_interval=settings.ws_ping_interval,
        ws_ping_timeout=settings.ws_ping_timeout,
        log_level=settings.log_level,
        # uvicorn formats every request's access-log arguments before the logger drops the line:
        # 4% of the server's time on binary publishes with the log level at warning. The hot
        # routes' lines: app/http/access_log.py.
        access_log=settings.log_level.lower() in ("trace", "debug", "info"),
        timeout_graceful_shutdown=5,
        # X-Forwarded-* only from the proxies CHUNKMQ_FORWARDED_ALLOW_IPS names (uvicorn's own default
        # trusts 127.0.0.1, and anyone on the machine could then pick the address the login limit counts)
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
    )


def uvicorn_server() -> tuple[type[uvicorn.Config], type[uvicorn.Server]]:
    """uvicorn's Config and Server (its documented way to run a server from code) without running
    uvicorn/__init__.py, which imports uvicorn.main: its command line (click) and its reloaders
    (multiprocessing, watchfiles), which `serve` never uses, a twentieth of a restart's first stage.
    The package stands in sys.modules with its submodules and Config (uvicorn.lifespan imports it from
    the package) until `complete_uvicorn` runs its __init__, once the server answers."""
    if "uvicorn" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("uvicorn")
        assert spec is not None and spec.loader is not None
        sys.modules["uvicorn"] = importlib.util.module_from_spec(spec)
    from uvicorn.config import Config
    from uvicorn.server import Server

    sys.modules["uvicorn"].Config = Config  # type: ignore[attr-defined]
    return Config, Server


def complete_uvicorn() -> None:
    """Run uvicorn/__init__.py if `uvicorn_server` left it out: `import uvicorn` gets the whole package."""
    package = sys.modules.get("uvicorn")
    if package is not None and not hasattr(package, "run"):
        assert package.__spec__ is not None and package.__spec__.loader is not None
        package.__spec__.loader.exec_module(package)

