"""The migrations build exactly the schema the models describe, and run from anywhere."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import insert, inspect

from chunkmq.meta import MetaStore, upgrade
from chunkmq.meta.engine import make_engine
from chunkmq.meta.migrate import SCRIPT_LOCATION, alembic_config, current_revision, head_revision
from chunkmq.meta.models import Base, Exchange

TABLES = {"exchanges", "queues", "bindings", "groups", "users", "tokens", "alert_rules", "alert_states", "alert_events"}


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def _schema(path: Path) -> dict[str, frozenset[str]]:
    """Each table and index as the set of its DDL clauses, whitespace normalised: the full truth
    SQLite keeps (types, defaults, CHECKs, FK actions, AUTOINCREMENT), independent of clause order."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    db.close()
    schema = {}
    for name, sql in rows:
        if name == "alembic_version":
            continue
        sql = re.sub(r"\s+", " ", sql).strip()
        head, _, body = sql.partition("(")
        body = body.removesuffix(")")
        schema[name] = frozenset({head.strip(), *(part.strip() for part in re.split(r",(?![^()]*\))", body))})
    return schema


def test_migration_has_no_difference_from_models(meta_url: str) -> None:
    engine = make_engine(meta_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, Base.metadata) == []
        assert set(inspect(conn).get_table_names()) >= TABLES
    engine.dispose()


def test_migrated_ddl_equals_create_all(tmp_path: Path, sqlite_url: str) -> None:
    created = tmp_path / "create_all.db"
    engine = make_engine(f"sqlite:///{created}")
    Base.metadata.create_all(engine)
    engine.dispose()
    migrated = _schema(Path(sqlite_url.removeprefix("sqlite:///")))
    assert migrated == _schema(created)
    # The two tables whose ids must never be reused.
    assert any("AUTOINCREMENT" in clause for clause in migrated["queues"])
    assert any("AUTOINCREMENT" in clause for clause in migrated["bindings"])


def test_upgrade_is_idempotent_and_downgrade_works(meta_url: str) -> None:
    upgrade(meta_url)
    assert current_revision(meta_url) == _head()
    cfg = alembic_config(meta_url)
    command.downgrade(cfg, "base")
    assert current_revision(meta_url) is None
    engine = make_engine(meta_url)
    assert not TABLES & set(inspect(engine).get_table_names())
    engine.dispose()
    upgrade(meta_url)
    assert current_revision(meta_url) == _head()


def test_every_older_revision_upgrades_to_the_models_keeping_its_rows(empty_url: str) -> None:
    """From empty, and from each revision a server may have left behind, to the head."""
    revisions = sorted(p.name[:4] for p in (SCRIPT_LOCATION / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    cfg = alembic_config(empty_url)
    for revision in revisions:
        upgrade(empty_url, revision)
        engine = make_engine(empty_url)
        with engine.begin() as conn:
            conn.execute(insert(Exchange).values(name=f"x{revision}", type="direct", created_at=datetime.now(UTC)))
        engine.dispose()
        upgrade(empty_url)
        assert current_revision(empty_url) == _head()
        engine = make_engine(empty_url)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            assert compare_metadata(context, Base.metadata) == [], revision
        engine.dispose()
        with MetaStore(empty_url) as store:
            assert [e.name for e in store.load().exchanges] == [f"x{revision}"]
        command.downgrade(cfg, "base")


def test_the_scripts_are_numbered_in_a_chain_so_the_highest_number_is_the_head() -> None:
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    numbered = sorted((SCRIPT_LOCATION / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert len(numbered) == len(list((SCRIPT_LOCATION / "versions").glob("*.py")))  # every script numbered
    for i, path in enumerate(numbered, start=1):
        script = scripts.get_revision(path.name[:4])
        assert script is not None and script.revision == f"{i:04d}" == path.name[:4]
        assert script.down_revision == (f"{i - 1:04d}" if i > 1 else None)
    assert head_revision() == _head()


def test_an_upgrade_at_the_head_loads_no_alembic_and_one_behind_is_migrated(meta_url: str) -> None:
    code = f"import sys; from chunkmq.meta import upgrade; upgrade({meta_url!r}); print('alembic' in sys.modules)"
    at_head = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert at_head.stdout.strip() == "False"
    command.downgrade(alembic_config(meta_url), "-1")
    behind = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert behind.stdout.strip() == "True"
    assert current_revision(meta_url) == _head()


def test_fresh_database_has_no_revision(tmp_path: Path) -> None:
    assert current_revision(f"sqlite:///{tmp_path / 'new.db'}") is None


def test_upgrade_from_another_working_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    subprocess.run(
        [sys.executable, "-m", "chunkmq.meta", "upgrade", url], cwd=tmp_path, check=True, capture_output=True
    )
    assert current_revision(url) == _head()



def test_a_new_sqlite_file_is_owner_only_under_an_open_umask(tmp_path: Path) -> None:
    """SQLite creates its file with the umask's mode (and its journals copy it): the file is made
    0600 before SQLite opens it, in a directory made 0700."""
    old = os.umask(0)
    try:
        upgrade(f"sqlite:///{tmp_path / 'data' / 'meta.db'}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "data" / "meta.db").stat().st_mode) == 0o600


def test_the_time_to_clear_kind_is_allowed_and_alert_states_survive_the_change(empty_url: str) -> None:
    """0009 widens the CHECK on alert_rules.kind in place: rules, their states and their ids stay."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    upgrade(empty_url, "0007")
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        rule = conn.execute(text("SELECT min(id) FROM alert_rules")).scalar()
        conn.execute(text('INSERT INTO alert_states (rule_id, queue, "group", state, value, since_ms) '
                          "VALUES (:r, 'q', 'g', 'firing', 5, 1)"), {"r": rule})
    engine.dispose()
    upgrade(empty_url)
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT rule_id, state FROM alert_states")).all() == [(rule, "firing")]
        conn.execute(text("INSERT INTO alert_rules (kind, threshold, created_at, updated_at) "
                          "VALUES ('time_to_clear', 600, '2026-01-01', '2026-01-01')"))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text("INSERT INTO alert_rules (kind, threshold, created_at, updated_at) "
                          "VALUES ('bogus', 1, '2026-01-01', '2026-01-01')"))
    engine.dispose()
    command.downgrade(alembic_config(empty_url), "0007")  # the time_to_clear rules go with the kind
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM alert_rules WHERE kind = 'time_to_clear'")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM alert_states")).scalar() == 1
    engine.dispose()
