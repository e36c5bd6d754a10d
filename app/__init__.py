"""chunkmq: a message broker with chunk-file storage, a REST/WebSocket API and a browser console.

`from chunkmq import Client, AsyncClient` is the Python client (docs/client.md). The client's names
are loaded on first use: the server's modules import this package too, and need none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from chunkmq.client import *  # noqa: F403


def __getattr__(name: str) -> Any:
    # The client's names are classes. `from chunkmq import web` asks for the submodule here first: a
    # lower-case name must not load the client (httpx, websockets, rich), a third of a server's start.
    if not name[:1].isupper():
        raise AttributeError(f"module 'chunkmq' has no attribute {name!r}")
    client = importlib.import_module("chunkmq.client")
    if name in client.__all__:
        return getattr(client, name)
    raise AttributeError(f"module 'chunkmq' has no attribute {name!r}")


def __dir__() -> list[str]:
    client = importlib.import_module("chunkmq.client")
    return sorted([*globals(), *client.__all__])
