"""`chunkmq --debug` and CHUNKMQ_DEBUG=1 (app/cli.py): an error that is one line by default comes
with its traceback, for a bug report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chunkmq.cli import main


@pytest.fixture
def garbage(tmp_path: Path) -> Path:
    """A data directory whose meta.db is no database: an error no command expects."""
    (tmp_path / "meta.db").write_text("this is not an SQLite database, not at all, not even close\n")
    return tmp_path


def test_an_unexpected_error_is_one_line_without_debug(garbage: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CHUNKMQ_DEBUG", raising=False)
    assert main(["token", "list", "--data-dir", str(garbage)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["chunkmq: DatabaseError: (sqlite3.DatabaseError) file is not a database"]
    monkeypatch.setenv("CHUNKMQ_DEBUG", "0")
    assert main(["token", "list", "--data-dir", str(garbage)]) == 1
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback_then_the_line(garbage: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], how: str) -> None:
    argv = ["token", "list", "--data-dir", str(garbage)]
    if how == "flag":
        monkeypatch.delenv("CHUNKMQ_DEBUG", raising=False)
        argv.insert(0, "--debug")
    else:
        monkeypatch.setenv("CHUNKMQ_DEBUG", "1")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert "sqlite3.DatabaseError: file is not a database" in err  # the cause, chained
    assert err.splitlines()[-1] == "chunkmq: DatabaseError: (sqlite3.DatabaseError) file is not a database"


def test_debug_shows_the_traceback_of_a_command_s_own_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CHUNKMQ_DEBUG", raising=False)
    assert main(["--debug", "token", "list", "--data-dir", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "CliError" in err and err.splitlines()[-1].startswith("chunkmq: no broker")


def test_the_installed_command_takes_debug_before_its_command(garbage: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "chunkmq.cli", "--debug", "token", "list", "--data-dir", str(garbage)],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 1 and run.stderr.startswith("Traceback"), run.stderr
