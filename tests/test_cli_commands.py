"""The command line's contract (app/cli.py): commands find the broker's data as `serve` does and
refuse a directory without it, every error is one line and a non-zero exit, every option is described."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from chunkmq.cli import build_parser, main
from chunkmq.meta import MetaStore
from tests.server import ServerProcess, broker_data


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("chunkmq") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", [
    ["token", "create", "--name", "x", "--admin"],
    ["token", "list"],
    ["user", "list"],
    ["user", "delete", "alice"],
    ["alerts", "list"],
])
def test_a_command_run_where_there_is_no_broker_data_refuses_and_creates_nothing(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHUNKMQ_DATA_DIR", raising=False)
    monkeypatch.delenv("CHUNKMQ_DATABASE_URL", raising=False)
    assert main(command) == 1
    out = capsys.readouterr()
    line = _one_line(out.err)
    assert f"no broker data in {tmp_path / 'data'}" in line and "--data-dir" in line and "CHUNKMQ_DATA_DIR" in line
    assert out.out == ""  # no token printed
    assert list(tmp_path.iterdir()) == []  # no ./data, no meta.db
    # an explicit --data-dir without a broker in it: the same
    assert main([*command, "--data-dir", str(tmp_path / "elsewhere")]) == 1
    assert f"no broker data in {tmp_path / 'elsewhere'}" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_commands_find_the_data_as_serve_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = broker_data(tmp_path / "broker")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHUNKMQ_DATA_DIR", str(data))  # as `serve` reads it
    assert main(["token", "create", "--name", "ci", "--admin"]) == 0
    plain = capsys.readouterr().out.strip()
    with MetaStore(f"sqlite:///{data / 'meta.db'}") as meta:
        assert meta.find_token(plain) is not None
    assert not (tmp_path / "data").exists()
    # an empty database file at the place is no broker's either
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "meta.db").touch()
    assert main(["token", "list", "--data-dir", str(tmp_path / "empty")]) == 1
    assert "holds no broker metadata" in _one_line(capsys.readouterr().err)


def test_user_list_shows_every_console_user_and_its_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = broker_data(tmp_path / "data")
    with MetaStore(f"sqlite:///{data / 'meta.db'}") as meta:
        meta.create_user("alice", "password number one", is_admin=True)
        meta.create_user("[bob]", "password number two", is_admin=False)
    assert main(["user", "list", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "alice" in line or "[bob]" in line]
    assert len(rows) == 2
    assert "admin" in rows[0] and "alice" in rows[0]
    assert "read-only" in rows[1] and "[bob]" in rows[1]  # the name as it is, not read as markup
    assert "password number one" not in out


def test_a_missing_file_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "chunkmq.cli", "definitions", "import", "nofile.json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert _one_line(result.stderr) == "chunkmq: cannot read nofile.json: No such file or directory"


@pytest.mark.parametrize("argv", [[], ["serve", "--port", "eighty"], ["token", "create"], ["nonsense"]])
def test_a_usage_error_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert _one_line(capsys.readouterr().err).endswith("--help)")


def test_an_unexpected_error_is_still_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "meta.db"
    bad.write_bytes(b"this is not a SQLite database" * 100)
    assert main(["token", "list", "--database-url", f"sqlite:///{bad}"]) == 1
    assert "DatabaseError" in _one_line(capsys.readouterr().err)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def test_every_option_of_serve_and_of_the_data_commands_is_described() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    serve = commands["serve"]
    assert {a.dest for a in _options(serve)} >= {"host", "port", "data_dir", "fsync"}
    for action in _options(serve):
        assert action.help, f"serve {action.option_strings} has no help"
    for name in ("token", "user"):
        for sub in commands[name]._subparsers._group_actions[0].choices.values():
            for action in _options(sub):
                assert action.help, f"{name} {sub.prog} {action.option_strings} has no help"
    text = subprocess.run([sys.executable, "-m", "chunkmq.cli", "serve", "--help"], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    for variable in ("CHUNKMQ_HOST", "CHUNKMQ_PORT", "CHUNKMQ_DATA_DIR", "CHUNKMQ_FSYNC"):
        assert variable in text


def test_an_import_conflict_names_the_differing_settings_as_json(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", CHUNKMQ_AUTH="off").start()
    try:
        httpx.put(f"{server.url}/api/v1/queues/orders", json={"max_messages": 10}, timeout=30).raise_for_status()
        httpx.put(f"{server.url}/api/v1/exchanges/events", json={"type": "topic"}, timeout=30).raise_for_status()
        document = {"queues": [{"name": "orders", "max_messages": 20}],
                    "exchanges": [{"name": "events", "type": "fanout"}]}
        (tmp_path / "defs.json").write_bytes(orjson.dumps(document))
        result = subprocess.run([sys.executable, "-m", "chunkmq.cli", "definitions", "import", "defs.json",
                                 "--url", server.url], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1
        line = _one_line(result.stderr)
        assert "None" not in line and "{'" not in line  # JSON, not a Python dict
        assert ('exchange \'events\' exists with other settings: {"type":"topic"} (the file has {"type":"fanout"})'
                in line)
        assert ('queue \'orders\' exists with other settings: {"max_messages":10} (the file has {"max_messages":20})'
                in line)
    finally:
        server.stop()


def test_a_command_line_parses_the_same_with_its_own_commands_parser_alone() -> None:
    lines = [["serve", "--port", "9000", "--fsync", "always"], ["token", "create", "--name", "ci", "--write", "^q$"],
             ["user", "list"], ["alerts", "add", "--kind", "stalled", "--threshold", "1"],
             ["definitions", "export", "--url", "http://127.0.0.1:1"], ["spark", "inspect", "--data-dir", "d"]]
    for argv in lines:
        own = build_parser(argv[0])
        assert list(own._subparsers._group_actions[0].choices) == [argv[0]]  # type: ignore[union-attr]
        alone, among_all = vars(own.parse_args(argv)), vars(build_parser().parse_args(argv))
        assert alone.pop("func").__qualname__ == among_all.pop("func").__qualname__  # spark's are made per parser
        assert alone == among_all


def test_help_loads_neither_the_orm_nor_the_web_stack() -> None:
    code = ("import sys, contextlib\nfrom chunkmq.cli import main\n"
            "for argv in (['--help'], ['alerts', 'add', '--help'], ['token', '--help'], ['serve', '--help']):\n"
            "    with contextlib.suppress(SystemExit):\n        main(argv)\n"
            "print(sorted({m.partition('.')[0] for m in sys.modules} & {'sqlalchemy', 'fastapi', 'starlette', "
            "'httpx', 'pyspark', 'alembic'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_commands_that_change_the_database_are_audited_and_audit_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import getpass

    data = broker_data(tmp_path / "data")
    where = ["--data-dir", str(data)]
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("a long secret password\n"))
    assert main(["user", "create", "carol", "--password-stdin", *where]) == 0
    assert main(["token", "create", "--name", "ci", "--read", ".*", *where]) == 0
    token = capsys.readouterr().out.strip()
    assert main(["token", "delete", "999", *where]) == 1
    assert main(["token", "list", *where]) == 0  # a read: not recorded
    capsys.readouterr()
    assert main(["audit", *where]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "cli" in line]
    me = getpass.getuser()
    assert len(rows) == 3, out
    assert "token.delete" in rows[0] and "999" in rows[0] and "token_not_found" in rows[0] and me in rows[0]
    assert "token.create" in rows[1] and "ci" in rows[1] and " ok " in rows[1]
    assert "user.create" in rows[2] and "carol" in rows[2] and "local" in rows[2]
    assert token not in out and "a long secret password" not in out
    assert main(["audit", "--action", "user", *where]) == 0
    only = [line.split() for line in capsys.readouterr().out.splitlines() if "cli" in line]
    assert only == [rows[2].split()]  # the same row (column widths differ)
    assert main(["audit", "--since", "soon", *where]) == 1
    assert "not a time" in _one_line(capsys.readouterr().err)
