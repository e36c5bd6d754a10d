"""app/resources.py: the migration scripts and browser assets are found in a wheel's layout and in the
source checkout's."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkmq import resources


def test_the_source_directory_when_the_package_has_no_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "chunkmq"
    package.mkdir()
    monkeypatch.setattr(resources, "PACKAGE", package)
    assert resources.shipped("migrations", "alembic") == tmp_path / "alembic"


def test_the_wheels_directory_when_the_package_has_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "chunkmq"
    (package / "migrations").mkdir(parents=True)
    (tmp_path / "alembic").mkdir()  # a wheel's copy wins over anything beside the package
    monkeypatch.setattr(resources, "PACKAGE", package)
    assert resources.shipped("migrations", "alembic") == package / "migrations"
    (package / "static").write_text("a file, not a directory")
    assert resources.shipped("static", "static") == tmp_path / "static"


def test_this_install_finds_the_migrations_and_the_assets() -> None:
    assert (resources.MIGRATIONS / "env.py").is_file()
    assert any(resources.MIGRATIONS.glob("versions/0001_*.py"))
    assert (resources.STATIC / "vendor" / "htmx" / "htmx.min.js").is_file()
