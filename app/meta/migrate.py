"""Alembic, driven from code: `upgrade(url)` brings any database to the newest schema.

The configuration is built here rather than read from an alembic.ini, so it works from any working
directory. The migration scripts live in <repo>/alembic (chunkmq/migrations in a wheel: app/resources.py).

For developers, `python -m chunkmq.meta upgrade [URL]` and `python -m chunkmq.meta revision "message"`
(app/meta/__main__.py, docs/metadata.md).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, make_url

from chunkmq.meta import plain
from chunkmq.meta.engine import make_engine
from chunkmq.resources import MIGRATIONS
from chunkmq.storage.files import DIR_MODE, FILE_MODE

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = MIGRATIONS


def head_revision() -> str:
    """The newest migration's revision among the scripts at SCRIPT_LOCATION."""
    return plain.head_revision(SCRIPT_LOCATION)


def alembic_config(url: str) -> Config:
    from alembic.config import Config  # alembic is loaded only when a migration runs (see upgrade)

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    # Config values go through configparser interpolation, so a '%' in a URL (an escaped password)
    # must be doubled here; env.py reads the URL back unescaped.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _ensure_sqlite_dir(url: str) -> None:
    """Create a SQLite database's directory (0700) and the empty file (0600) when missing: SQLite would
    create the file with the umask's mode, readable by everyone, and its journals copy that mode."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:"):
        path = Path(database)
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))


def upgrade(url: str, revision: str = "head") -> None:
    """Apply every migration up to `revision` to the database at `url` (for SQLite, creating the file
    and its directory when missing). A database already at the newest revision is left as it is
    without loading alembic, which is a tenth of a server's start."""
    _ensure_sqlite_dir(url)
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            if revision == "head" and _revisions(connection) == [head_revision()]:
                return
            from alembic import command

            cfg = alembic_config(url)
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    """The revision the database at `url` is at, or None when it has never been migrated."""
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def _revisions(connection: Connection) -> list[str]:
    """The revisions alembic recorded in the database (none before the first migration)."""
    if not inspect(connection).has_table("alembic_version"):
        return []
    return list(connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars())


def _next_rev_id() -> str:
    return f"{int(head_revision()) + 1:04d}"


def new_revision(message: str) -> Path:
    """Autogenerate the next migration (alembic/versions/NNNN_<message>.py) by diffing the models
    against a scratch SQLite database brought to head."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'scratch.db'}"
        upgrade(url)
        from alembic import command

        script = command.revision(alembic_config(url), message, autogenerate=True, rev_id=_next_rev_id())
        assert script is not None and not isinstance(script, list)
        return Path(script.path)
