"""Where the files that ship beside the code are found: the migration scripts and the browser assets.

The source tree keeps them beside the package (`alembic/`, `static/`); a wheel carries them inside
it (`chunkmq/migrations`, `chunkmq/static`), mapped by `[tool.setuptools.package-dir]`.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def shipped(in_wheel: str, in_source: str) -> Path:
    """The directory `in_wheel` of an installed wheel, else `in_source` of the source checkout."""
    installed = PACKAGE / in_wheel
    return installed if installed.is_dir() else PACKAGE.parent / in_source


MIGRATIONS = shipped("migrations", "alembic")
STATIC = shipped("static", "static")
