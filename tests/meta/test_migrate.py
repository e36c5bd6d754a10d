"""app/meta/migrate.py, what tests/meta/test_migrations.py (the scripts themselves) does not cover:
the alembic configuration built in code, the SQLite file made before SQLite opens it, and the next
migration written by autogenerate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chunkmq.meta import migrate


def test_a_percent_in_the_url_survives_configparser_interpolation() -> None:
    url = "postgresql+psycopg://user:p%40ss%25word@db.example/chunkmq"
    cfg = migrate.alembic_config(url)
    assert cfg.get_main_option("sqlalchemy.url") == url
    assert cfg.get_main_option("script_location") == str(migrate.SCRIPT_LOCATION)


def test_a_sqlite_file_and_its_directories_are_made_once(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "meta.db"
    migrate._ensure_sqlite_dir(f"sqlite:///{db}")
    assert db.is_file() and db.stat().st_size == 0
    db.write_bytes(b"kept")
    migrate._ensure_sqlite_dir(f"sqlite:///{db}")  # an existing file is left as it is
    assert db.read_bytes() == b"kept"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "postgresql+psycopg://u@h/db"])
def test_databases_without_a_file_of_ours_are_left_alone(url: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    migrate._ensure_sqlite_dir(url)
    assert list(tmp_path.iterdir()) == []


def test_new_revision_writes_the_next_numbered_script_from_the_models(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """In a copy of the scripts: the models equal the newest migration, so the new one changes nothing."""
    scripts = tmp_path / "alembic"
    shutil.copytree(migrate.SCRIPT_LOCATION, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(migrate, "SCRIPT_LOCATION", scripts)
    head = migrate.head_revision()
    path = migrate.new_revision("add a thing")
    number = f"{int(head) + 1:04d}"
    assert path.parent == scripts / "versions" and path.name.startswith(f"{number}_add_a_thing")
    text = path.read_text()
    assert f"revision: str = '{number}'\n" in text
    assert f"down_revision: str | None = '{head}'\n" in text  # it revises the previous head
    assert migrate.head_revision() == number
    upgrade_body = text.split("def upgrade()", 1)[1].split("def downgrade()", 1)[0]
    assert "op." not in upgrade_body  # nothing to migrate
