"""`chunkmq token ...` run as a real process, from a working directory of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chunkmq.meta import MetaStore
from tests.server import broker_data


def _chunkmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "token", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_create_list_delete(tmp_path: Path) -> None:
    data_dir = broker_data(tmp_path / "data")
    created = _chunkmq(
        "create", "--name", "ci", "--write", r"orders\..*", "--read", "[a-z]+", "--data-dir", str(data_dir),
        cwd=tmp_path,
    )
    assert created.returncode == 0, created.stderr
    plain = created.stdout.strip()
    assert plain.startswith("cmq_") and "\n" not in plain
    assert "shown only now" in created.stderr

    admin = _chunkmq("create", "--name", "ops", "--admin", "--data-dir", str(data_dir), cwd=tmp_path)
    assert admin.returncode == 0, admin.stderr

    with MetaStore(f"sqlite:///{data_dir / 'meta.db'}") as meta:
        row = meta.find_token(plain)
        assert row is not None
        assert ((row.name, row.is_admin, row.configure, row.write, row.read)
                == ("ci", False, "", r"orders\..*", "[a-z]+"))
        ops = meta.find_token(admin.stdout.strip())
        assert ops is not None and ops.is_admin

    listed = _chunkmq("list", "--data-dir", str(data_dir), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert row.prefix in listed.stdout and "[a-z]+" in listed.stdout and r"orders\..*" in listed.stdout
    assert plain not in listed.stdout

    deleted = _chunkmq("delete", str(row.id), "--data-dir", str(data_dir), cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    with MetaStore(f"sqlite:///{data_dir / 'meta.db'}") as meta:
        assert meta.find_token(plain) is None
        assert [t.name for t in meta.list_tokens()] == ["ops"]

    again = _chunkmq("delete", str(row.id), "--data-dir", str(data_dir), cwd=tmp_path)
    assert again.returncode == 1 and f"token {row.id} does not exist (token_not_found)" in again.stderr


def test_invalid_pattern_is_a_clear_error(tmp_path: Path) -> None:
    result = _chunkmq("create", "--name", "bad", "--read", "(", "--data-dir", str(broker_data(tmp_path)), cwd=tmp_path)
    assert result.returncode == 2
    assert "invalid read pattern '('" in result.stderr and result.stdout == ""


def test_data_dir_from_the_environment(tmp_path: Path) -> None:
    env = {**os.environ, "CHUNKMQ_DATA_DIR": str(broker_data(tmp_path / "env-data"))}
    result = subprocess.run(
        [sys.executable, "-m", "chunkmq.cli", "token", "create", "--name", "ci"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    with MetaStore(f"sqlite:///{tmp_path / 'env-data' / 'meta.db'}") as meta:
        assert meta.find_token(result.stdout.strip()) is not None
