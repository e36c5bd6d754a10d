"""The metadata layer: exchanges, queues, bindings, groups, users and tokens in SQL (SQLAlchemy 2.0,
Alembic migrations). See docs/metadata.md.

    from chunkmq.meta import MetaStore, upgrade
    upgrade(settings.meta_url)            # always first: brings the schema to the newest revision
    store = MetaStore(settings.meta_url)
    snapshot = store.load()

The names below are loaded from their modules when first used: the row types and errors need no
SQLAlchemy, and a server's first stage reads the metadata without it (app/meta/plain.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chunkmq.meta.errors import AlreadyExists, InvalidValue, MetaError, NotFound
    from chunkmq.meta.migrate import upgrade
    from chunkmq.meta.repository import QUEUE_SETTINGS, MetaStore
    from chunkmq.meta.rows import (
        BindingRow,
        ExchangeRow,
        GroupRow,
        GroupState,
        MetaSnapshot,
        QueueRow,
        TokenRow,
        UserRow,
    )

_HOMES = {
    "AlreadyExists": "errors", "InvalidValue": "errors", "MetaError": "errors", "NotFound": "errors",
    "upgrade": "migrate",
    "QUEUE_SETTINGS": "repository", "MetaStore": "repository",
    "BindingRow": "rows", "ExchangeRow": "rows", "GroupRow": "rows", "GroupState": "rows", "MetaSnapshot": "rows",
    "QueueRow": "rows", "TokenRow": "rows", "UserRow": "rows",
}

__all__ = [
    "QUEUE_SETTINGS",
    "AlreadyExists",
    "BindingRow",
    "ExchangeRow",
    "GroupRow",
    "GroupState",
    "InvalidValue",
    "MetaError",
    "MetaSnapshot",
    "MetaStore",
    "NotFound",
    "QueueRow",
    "TokenRow",
    "UserRow",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
