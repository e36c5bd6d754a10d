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
    created = _chunkmq("create", "alice", "--password-stdin", *where, stdin="s3cret pass\n", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    viewer = _chunkmq("create", "bob", "--read-only", "--password-stdin", *where, stdin="bobpw\n", cwd=tmp_path)
    assert viewer.returncode == 0, viewer.stderr
    again = _chunkmq("create", "alice", "--password-stdin", *where, stdin="other\n", cwd=tmp_path)
    assert again.returncode == 2 and "alice" in again.stderr

    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        alice = meta.check_password("alice", "s3cret pass")
        assert alice is not None and alice.is_admin
        bob = meta.check_password("bob", "bobpw")
        assert bob is not None and not bob.is_admin

    changed = _chunkmq("passwd", "alice", "--password-stdin", *where, stdin="new one\n", cwd=tmp_path)
    assert changed.returncode == 0, changed.stderr
    empty = _chunkmq("passwd", "alice", "--password-stdin", *where, stdin="\n", cwd=tmp_path)
    assert empty.returncode == 2 and "empty" in empty.stderr
    missing = _chunkmq("passwd", "carol", "--password-stdin", *where, stdin="x\n", cwd=tmp_path)
    assert missing.returncode == 1

    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        assert meta.check_password("alice", "s3cret pass") is None
        assert meta.check_password("alice", "new one") is not None

    deleted = _chunkmq("delete", "bob", *where, cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    assert _chunkmq("delete", "bob", *where, cwd=tmp_path).returncode == 1
    with MetaStore(f"sqlite:///{tmp_path / 'data' / 'meta.db'}") as meta:
        assert [u.name for u in meta.list_users()] == ["alice"]
