"""The metadata layer: exchanges, queues, bindings, groups, users and tokens in SQL (SQLAlchemy 2.0,
Alembic migrations). See docs/metadata.md.

    from chunkmq.meta import MetaStore, upgrade
    upgrade(settings.meta_url)            # always first: brings the schema to the newest revision
    store = MetaStore(settings.meta_url)
    snapshot = store.load()
"""

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
