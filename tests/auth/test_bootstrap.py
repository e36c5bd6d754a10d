"""The first start makes one admin token, readable by the owner only; later starts make none."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from chunkmq.auth.bootstrap import bootstrap_admin_token, bootstrap_admin_user
from chunkmq.auth.permissions import Permissions
from chunkmq.meta import MetaStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_start_writes_an_admin_token_0600(store: MetaStore, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    plain = bootstrap_admin_token(store, data_dir)
    assert plain is not None
    token_file = data_dir / "admin-token"
    assert token_file.read_text() == plain + "\n"
    assert _mode(token_file) == 0o600
    row = store.find_token(plain)
    assert row is not None and row.is_admin
    assert Permissions.of(row).allows("configure", "anything")
    assert [p.name for p in data_dir.iterdir()] == ["admin-token"]  # no temp file left behind


def test_second_start_does_nothing(store: MetaStore, tmp_path: Path) -> None:
    plain = bootstrap_admin_token(store, tmp_path)
    before = (tmp_path / "admin-token").stat()
    assert bootstrap_admin_token(store, tmp_path) is None
    after = (tmp_path / "admin-token").stat()
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
    assert (tmp_path / "admin-token").read_text() == f"{plain}\n"
    assert len(store.list_tokens()) == 1


def test_no_bootstrap_when_a_token_exists(store: MetaStore, tmp_path: Path) -> None:
    store.create_token("ci", read=".*")
    assert bootstrap_admin_token(store, tmp_path) is None
    assert not (tmp_path / "admin-token").exists()


def test_stale_world_readable_file_is_replaced_by_a_0600_one(store: MetaStore, tmp_path: Path) -> None:
    stale = tmp_path / "admin-token"
    stale.write_text("cmq_old\n")
    stale.chmod(0o644)
    plain = bootstrap_admin_token(store, tmp_path)
    assert stale.read_text() == f"{plain}\n"
    assert _mode(stale) == 0o600


def test_failed_write_takes_the_token_back(store: MetaStore, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(OSError):
        bootstrap_admin_token(store, not_a_dir)
    assert not store.has_tokens()  # so the next start bootstraps again


def test_first_start_creates_the_admin_console_user_0600(store: MetaStore, tmp_path: Path) -> None:
    password = bootstrap_admin_user(store, tmp_path)
    assert password is not None and len(password) >= 20
    password_file = tmp_path / "admin-password"
    assert password_file.read_text() == password + "\n"
    assert _mode(password_file) == 0o600
    user = store.check_password("admin", password)
    assert user is not None and user.is_admin
    assert store.check_password("admin", password + "x") is None
    assert bootstrap_admin_user(store, tmp_path) is None  # the second start leaves it alone
    assert password_file.read_text() == password + "\n"
