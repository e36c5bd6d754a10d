"""`chunkmq user create|passwd|delete` run as a real process against a real metadata database."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chunkmq.meta import MetaStore
from tests.server import broker_data


def _chunkmq(*args: str, stdin: str = "", cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "user", *args], cwd=cwd, input=stdin, capture_output=True, text=True,
        timeout=60,
    )


def test_create_passwd_delete(tmp_path: Path) -> None:
    where = ("--data-dir", str(broker_data(tmp_path / "data")))
    created = _chunkmq("create", "alice", "--password-stdin", *where, stdin="s3cret passphrase\n", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    viewer = _chunkmq("create", "bob", "--read-only", "--password-stdin", *where,
                      stdin="bob's password 1\n", cwd=tmp_path)
    assert viewer.returncode == 0, viewer.stderr
    again = _chunkmq("create", "alice", "--password-stdin", *where, stdin="other password\n", cwd=tmp_path)
    assert again.returncode == 2 and "alice" in again.stderr

    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        alice = meta.check_password("alice", "s3cret passphrase")
        assert alice is not None and alice.is_admin
        bob = meta.check_password("bob", "bob's password 1")
        assert bob is not None and not bob.is_admin

    changed = _chunkmq("passwd", "alice", "--password-stdin", *where, stdin="new one, longer\n", cwd=tmp_path)
    assert changed.returncode == 0, changed.stderr
    empty = _chunkmq("passwd", "alice", "--password-stdin", *where, stdin="\n", cwd=tmp_path)
    assert empty.returncode == 2 and "at least 12 characters" in empty.stderr
    missing = _chunkmq("passwd", "carol", "--password-stdin", *where, stdin="long enough password\n", cwd=tmp_path)
    assert missing.returncode == 1

    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        assert meta.check_password("alice", "s3cret passphrase") is None
        assert meta.check_password("alice", "new one, longer") is not None

    deleted = _chunkmq("delete", "bob", *where, cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    assert _chunkmq("delete", "bob", *where, cwd=tmp_path).returncode == 1
    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        assert [u.name for u in meta.list_users()] == ["alice"]


def test_a_short_password_is_refused_with_the_minimum(tmp_path: Path) -> None:
    where = ("--data-dir", str(broker_data(tmp_path / "data")))
    short = _chunkmq("create", "dave", "--password-stdin", *where, stdin="x\n", cwd=tmp_path)
    assert short.returncode == 2
    assert "a password needs at least 12 characters (this one has 1)" in short.stderr
    eleven = _chunkmq("create", "dave", "--password-stdin", *where, stdin="12345678901\n", cwd=tmp_path)
    assert eleven.returncode == 2
    assert _chunkmq("create", "dave", "--password-stdin", *where, stdin="123456789012\n", cwd=tmp_path).returncode == 0
