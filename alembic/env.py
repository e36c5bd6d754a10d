"""Alembic environment for chunkmq's metadata database.

Normally run through app/meta/migrate.py, which passes an open connection in
`config.attributes["connection"]`; otherwise a connection is made from `sqlalchemy.url`.
"""

from __future__ import annotations

from typing import Any

from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection
from sqlalchemy.types import TypeDecorator

from alembic import context
from chunkmq.meta.engine import make_engine
from chunkmq.meta.models import Base

config = context.config
target_metadata = Base.metadata


def _render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | bool:
    """Autogenerate writes our TypeDecorators as the plain SQL type under them: a migration must not
    import app code, which keeps changing after the migration is written."""
    if type_ == "type" and isinstance(obj, TypeDecorator):
        return f"sa.{obj.impl!r}"
    return False


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead (future migrations).
        render_as_batch=True,
        compare_type=True,
        compare_server_default=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url, "set sqlalchemy.url or pass a connection"
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("chunkmq migrations run online only (python -m chunkmq.meta.migrate upgrade)")
run_migrations_online()
